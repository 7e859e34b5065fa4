"""Every Prometheus answer is hostile input (issue 15): a tenant controls what its pods export and may
name its own Prometheus. Nothing it sends may crash the tick, cost another resource its tuning, or
make the operator's memory grow."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import json
import threading
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specinfer.api.speculation import K_CEILING, MAX_BATCH_SIZE
from specinfer.operator.pure.access import PrometheusAccess
from specinfer.operator.tuner import loop as loop_module
from specinfer.operator.tuner import prometheus as prom
from specinfer.operator.tuner.bounded_http import ResponseTooLarge
from specinfer.operator.tuner.loop import TuningLoop
from specinfer.operator.tuner.policy import TuningInput, decide
from specinfer.operator.tuner.pure.observe import SERIES_MALFORMED, index_results, observe
from specinfer.operator.tuner.pure.queries import Query, build_queries
from tests.unit.test_tuner_loop import SETTINGS, FakeKube, FakePrometheus, high_acceptance, resource
from tests.unit.test_tuner_observe import LABELS, NOW, WINDOW, merge, sample, target, vllm_answers

pytestmark = pytest.mark.unit

QUERY_NAMES = [q.name for q in build_queries(LABELS, WINDOW)]
LABEL_NAMES = ["position", "batch_size", "k", "quantile", "pod", "le", "model_name"]
hostile_text = st.one_of(st.sampled_from(["0", "1", "3", "63", "64", "200000000", "-1", "1e9", "5-6", "1025+",
                                          "33-48", "0.5", "NaN", "", "x" * 300, "\x00", "٣"]),
                         st.text(max_size=12))
hostile_value = st.one_of(st.sampled_from(["1", "0", "-5", "NaN", "+Inf", "-Inf", "1e308", "abc", "", "9" * 80]),
                          st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers().map(str))
hostile_sample = st.one_of(
    st.fixed_dictionaries({
        "metric": st.dictionaries(st.sampled_from(LABEL_NAMES), hostile_text, max_size=4).map(
            lambda labels: {"namespace": "ns", "specinfer_io_name": "evil", **labels}),
        "value": st.tuples(st.just(NOW), hostile_value).map(list),
    }),
    st.sampled_from([{}, {"metric": "x"}, {"metric": {"namespace": "ns"}}, [1, 2], "garbage", None,
                     {"metric": {"namespace": "ns", "specinfer_io_name": "evil"}, "value": [NOW]},
                     {"metric": {"namespace": "ns", "specinfer_io_name": "evil"}, "value": [NOW, 3]},
                     {"metric": {"namespace": ["ns"], "specinfer_io_name": "evil"}, "value": [NOW, "1"]}]),
)
hostile_answers = st.dictionaries(st.sampled_from(QUERY_NAMES),
                                  st.one_of(st.lists(hostile_sample, max_size=12), st.sampled_from([None, "x", 7, {}])),
                                  max_size=len(QUERY_NAMES))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=hostile_answers, k=st.integers(0, 8))
def test_the_observe_path_survives_any_answer(answers, k):
    """Merged with a healthy engine's series, whatever the tenant adds: no exception, bounded output,
    and the healthy resource in the same answers is observed exactly as without the hostile one."""
    healthy = vllm_answers("ns", "good")
    indexed = index_results(merge(healthy, {q: v for q, v in answers.items() if isinstance(v, list)}), LABELS)
    index_results(answers, LABELS)  # the unmerged, even less well-formed form as well
    evil = observe(target("evil", k=k), indexed.get(("ns", "evil")), labels=LABELS, now=NOW, window_seconds=WINDOW)
    if evil.observation is not None:
        obs = evil.observation
        assert len(obs.accepted_per_position) <= K_CEILING
        assert len(obs.drafts_per_position or ()) <= K_CEILING
        assert all(0 <= step.k <= K_CEILING and step.batch_size <= MAX_BATCH_SIZE for step in obs.step_samples or ())
        assert all(1 <= size <= MAX_BATCH_SIZE for size, _ in obs.batch_size_distribution or ())
        decide(obs, TuningInput(method="eagle3", max_batch_size=64), None, NOW)  # holds or decides, never raises
    else:
        assert evil.missing
    good = observe(target("good"), indexed[("ns", "good")], labels=LABELS, now=NOW, window_seconds=WINDOW)
    alone = observe(target("good"), index_results(healthy, LABELS)[("ns", "good")], labels=LABELS, now=NOW,
                    window_seconds=WINDOW)
    assert good == alone


@pytest.mark.parametrize(("query", "labels", "named"), [
    ("acceptedPerPosition", {"position": "200000000"}, "position='200000000'"),
    ("draftsPerPosition", {"position": "-3"}, "position='-3'"),
    ("stepCount", {"batch_size": "lots", "k": "1"}, "batch_size='lots'"),
    ("stepSeconds", {"batch_size": "4", "k": "9999999"}, "k='9999999'"),
    ("batchQuantiles", {"quantile": "0.99999", "pod": "p"}, "quantile='0.99999'"),
])
def test_a_label_our_engines_never_export_refuses_that_resource_naming_it(query, labels, named):
    answers = vllm_answers("ns", "evil")
    answers[query] = [*answers.get(query, []), sample("ns", "evil", 5.0, **labels)]
    result = observe(target("evil"), index_results(answers, LABELS)[("ns", "evil")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    assert result.observation is None and result.reason == SERIES_MALFORMED
    assert named in result.missing


def test_memory_stays_flat_under_a_stream_of_hostile_answers():
    """The position label once sized a list (position=200000000: 1.6 GB); repeated hostile ticks must
    not grow memory either."""
    healthy = vllm_answers("ns", "good")

    def tick(index: int) -> None:
        answers = merge(healthy, {"acceptedPerPosition": [sample("ns", "evil", 1.0, position=str(10**8 + index))],
                                  "stepCount": [sample("ns", "evil", 1.0, batch_size=f"{index}-x", k="1")]})
        indexed = index_results(answers, LABELS)
        for name in ("good", "evil"):
            observe(target(name), indexed[("ns", name)], labels=LABELS, now=NOW, window_seconds=WINDOW)

    tick(0)
    tracemalloc.start()
    try:
        tick(1)
        baseline, _ = tracemalloc.get_traced_memory()
        for index in range(2, 500):
            tick(index)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    assert current - baseline < 256 * 1024, f"grew {(current - baseline) / 1e3:.0f} kB over 500 ticks"


class _Server:
    """A Prometheus stand-in answering every query with one fixed body (optionally gzip-encoded)."""

    def __init__(self, body: bytes, *, gzipped: bool = False):
        data = gzip.compress(body) if gzipped else body

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if gzipped:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip-bomb"])
def test_an_oversized_answer_fails_the_query_not_the_operator(gzipped):
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []},
                       "padding": "0" * (8 * 1024 * 1024)}).encode()
    server = _Server(body, gzipped=gzipped)
    try:
        source = prom.Source(server.url, timeout_seconds=10, max_response_bytes=1024 * 1024)
        run = prom.run_queries(source, [Query("a", "up")], at=NOW)
        small = prom.run_queries(prom.Source(server.url, max_response_bytes=16 * 1024 * 1024),
                                 [Query("a", "up")], at=NOW)
    finally:
        server.close()
    assert run.failure is not None and run.failure.reason == prom.QUERY_FAILED
    assert "exceeds 1048576 bytes" in run.failure.message
    assert small.failure is None and small.results == {"a": []}  # the same answer within the limit reads fine
    assert issubclass(ResponseTooLarge, Exception)


def _run(resources, kube, monkeypatch, answers_by_url: dict[str, dict]):
    servers = {url: FakePrometheus(answers) for url, answers in answers_by_url.items()}
    monkeypatch.setattr(prom, "_client", lambda source: servers[source.url])
    # every URL of the test is allowed (issue 15: the tuner queries no URL outside the allowlist)
    access = PrometheusAccess(default_url="http://prometheus:9090", allowed_urls=tuple(answers_by_url))
    loop = TuningLoop(kube=kube, resources=lambda: resources, settings=SETTINGS,
                      default_url="http://prometheus:9090", events=kube, clock=lambda: NOW, access=access)
    return asyncio.run(loop.tick())


def _conditions(kube: FakeKube, name: str) -> dict:
    (body,) = [b for path, b, _ in kube.patches if path.endswith(f"/{name}/status")]
    return {c["type"]: c for c in body["status"]["conditions"]}


def test_a_hostile_tenant_costs_only_itself(monkeypatch):
    evil = high_acceptance("evil")
    evil["acceptedPerPosition"].append(sample("ns", "evil", 1.0, position="200000000"))
    resources, kube = [resource("good"), resource("evil")], FakeKube()
    report = _run(resources, kube, monkeypatch, {"http://prometheus:9090": merge(high_acceptance("good"), evil)})
    assert report.actions["ns/good"] in ("setK", "setSchedule")  # tuned as if alone
    degraded = _conditions(kube, "evil")["TuningDegraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", SERIES_MALFORMED)
    assert "position='200000000'" in degraded["message"]


def test_a_resource_the_tuner_fails_on_is_degraded_and_the_others_go_on(monkeypatch):
    real_observe = loop_module.observe

    def failing(target, *args, **kwargs):
        if target.name == "evil":
            raise ZeroDivisionError("an unforeseen corner of the maths")
        return real_observe(target, *args, **kwargs)

    monkeypatch.setattr(loop_module, "observe", failing)
    resources, kube = [resource("evil"), resource("good")], FakeKube()
    report = _run(resources, kube, monkeypatch,
                  {"http://prometheus:9090": merge(high_acceptance("good"), high_acceptance("evil"))})
    assert report.actions["ns/good"] in ("setK", "setSchedule")
    degraded = _conditions(kube, "evil")["TuningDegraded"]
    assert degraded["reason"] == "TuningFailed" and "ZeroDivisionError" in degraded["message"]


def test_one_prometheus_failing_unexpectedly_costs_only_its_resources(monkeypatch):
    real_index = loop_module.index_results

    def failing(results, labels):
        if any("evil" in json.dumps(vector) for vector in results.values()):
            raise RecursionError("a deeply nested answer")
        return real_index(results, labels)

    monkeypatch.setattr(loop_module, "index_results", failing)
    good, evil = resource("good"), resource("evil")
    evil["spec"]["tuning"]["prometheus"] = {"url": "http://tenant-prometheus:9090"}
    kube = FakeKube()
    report = _run([evil, good], kube, monkeypatch, {"http://prometheus:9090": high_acceptance("good"),
                                                    "http://tenant-prometheus:9090": high_acceptance("evil")})
    assert report.actions["ns/good"] in ("setK", "setSchedule")
    assert any("RecursionError" in failure for failure in report.failures)
