"""The tuning loop's tick against a fake API client and a fake Prometheus (operator/tuner/loop.py, record.py)."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import pytest
import yaml

from specinfer.api import parse_spec
from specinfer.api.timestamps import rfc3339
from specinfer.operator.tuner import prometheus as prom
from specinfer.operator.tuner.loop import FIELD_MANAGER, TuningLoop
from specinfer.operator.tuner.pure.queries import build_queries
from specinfer.operator.tuner.pure.settings import TunerSettings
from specinfer.operator.tuner.pure.target import spec_config
from tests.crd_schema import assert_status_in_crd, schema_problems, status_schema
from tests.unit.test_tuner_observe import NOW, merge, vllm_answers

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "specinference.yaml"
SETTINGS = TunerSettings(windowSeconds=60, policy={"minSteps": 100, "confirmations": 1})


def resource(name: str, *, mode: str = "auto", k: int = 3) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1,
                        "creationTimestamp": rfc3339(NOW - 7200)}
    body["spec"]["tuning"]["mode"] = mode
    body["spec"]["speculation"]["numSpeculativeTokens"] = k
    old = rfc3339(NOW - 3600)
    body["status"] = {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "message": "", "lastTransitionTime": old},
            {"type": "Progressing", "status": "False", "reason": "RolloutComplete", "message": "",
             "lastTransitionTime": old},
        ],
        "effective": {"method": "eagle3", "configHash": "abc", **started(body)},
    }
    return body


def started(body: dict) -> dict:
    """K and schedule the pods run before any tuning, as the operator renders them (status.effective): an engine
    retuned in place starts with the spec's K and none above the crossover its prior predicts
    (runtime/contract/live_schedule/envelope.py)."""
    config = spec_config(parse_spec(body["spec"]))
    schedule = [{"minBatchSize": s, "maxBatchSize": e, "numSpeculativeTokens": k} for s, e, k in config.schedule or ()]
    return {"numSpeculativeTokens": config.num_speculative_tokens, **({"schedule": schedule} if schedule else {})}


def assert_status_model(status: dict) -> None:
    """Every key the loop writes is declared by the CRD on disk, with a value of its type: the API
    server would prune an unknown key in silence (a typo would lose data without an error)."""
    assert_status_in_crd("SpeculativeInference", status)


class FakeKube:
    def __init__(self):
        self.patches: list[tuple[str, dict, list]] = []
        self.events: list[tuple[str, str, str]] = []

    async def request(self, method, path, *, query=None, body=None, content_type=None, verb=None):
        assert method == "PATCH"
        assert_status_model(body["status"])
        self.patches.append((path, copy.deepcopy(body), query))
        return copy.deepcopy(body)

    async def get(self, path, **query):
        return None

    async def record(self, resource, *, type_, reason, message):
        self.events.append((type_, reason, message))


class FakePrometheus:
    """Answers each query by name; counts round trips; can be made unreachable."""

    def __init__(self, answers: dict, *, down: bool = False):
        self.by_promql = {q.promql: q.name for q in build_queries(SETTINGS.labels.mapping(), SETTINGS.window_seconds)}
        self.answers, self.down, self.calls = answers, down, 0

    def custom_query(self, query, params=None):
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        return self.answers.get(self.by_promql[query], [])


@pytest.fixture
def fake_prometheus(monkeypatch):
    holder = {}

    def install(answers, **kwargs):
        holder["server"] = FakePrometheus(answers, **kwargs)
        monkeypatch.setattr(prom, "_client", lambda source: holder["server"])
        return holder["server"]

    return install


def run_tick(resources: list[dict], kube: FakeKube, now: float = NOW, loop: TuningLoop | None = None):
    loop = loop or TuningLoop(kube=kube, resources=lambda: resources, settings=SETTINGS,
                              default_url="http://prometheus:9090", events=kube, clock=lambda: now)
    loop.clock = lambda: now
    return loop, asyncio.run(loop.tick())


def apply_back(resources: list[dict], kube: FakeKube) -> None:
    """What the API server does with the status patches (status replaced field by field)."""
    for path, body, _ in kube.patches:
        for item in resources:
            if path.endswith(f"/{item['metadata']['name']}/status"):
                status = dict(body["status"])
                conditions = {c["type"]: c for c in item["status"].get("conditions") or []}
                conditions.update({c["type"]: c for c in status.pop("conditions", [])})  # a list-map keyed by type
                item["status"].update(status, conditions=list(conditions.values()))
    kube.patches.clear()


def high_acceptance(name: str) -> dict:
    return vllm_answers("ns", name, k=3, prefix=(0.92, 0.86, 0.8), drafts=40000, running=1.0)


def test_auto_mode_applies_a_change_through_status_only(fake_prometheus):
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a")], FakeKube()
    spec_before = copy.deepcopy(resources[0]["spec"])
    _, report = run_tick(resources, kube)
    path, body, query = kube.patches[0]
    assert path == "/apis/specinfer.io/v1alpha1/namespaces/ns/speculativeinferences/a/status"
    assert ("fieldManager", FIELD_MANAGER) in query
    assert set(body) == {"apiVersion", "kind", "metadata", "status"} and set(body["metadata"]) == {"name", "namespace"}
    tuning = body["status"]["tuning"]
    assert report.actions["ns/a"] in ("setK", "setSchedule"), tuning["lastDecision"]["reason"]
    assert tuning["applied"]["numSpeculativeTokens"] > 3  # high acceptance at batch 1: draft longer
    assert tuning["applied"]["since"] == rfc3339(NOW) and tuning["restartsLastHour"] == 1
    assert tuning["signals"] == "vllm" and json.loads(tuning["policyState"])["changes"] == [NOW]
    assert kube.events and kube.events[0][1].startswith("Tuning")
    conditions = {c["type"]: c for c in body["status"]["conditions"]}
    assert conditions["Tuned"]["reason"] == "ChangeApplied" and conditions["TuningDegraded"]["status"] == "False"
    assert body["status"]["metrics"]["meanBatchSize"] == 1.0
    assert resources[0]["spec"] == spec_before


def test_observe_mode_recommends_and_applies_nothing(fake_prometheus):
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a", mode="observe")], FakeKube()
    _, report = run_tick(resources, kube)
    tuning = kube.patches[0][1]["status"]["tuning"]
    assert report.actions["ns/a"] == "recommend", kube.patches[-1][1]["status"]["tuning"]["lastDecision"]
    assert "applied" not in tuning and tuning["recommendation"]["numSpeculativeTokens"] > 3
    assert tuning["restartsLastHour"] == 0 and not kube.events
    assert json.loads(tuning["policyState"])["changes"] == []  # nothing applied: no restart recorded
    # next interval: still recommending (not waiting for a change that will never be applied)
    apply_back(resources, kube)
    _, report = run_tick(resources, kube, NOW + 30)
    assert report.actions["ns/a"] == "recommend", kube.patches[-1][1]["status"]["tuning"]["lastDecision"]


def test_prometheus_down_holds_the_applied_config_and_reports(fake_prometheus):
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a")], FakeKube()
    loop, _ = run_tick(resources, kube)
    apply_back(resources, kube)
    applied = resources[0]["status"]["tuning"]["applied"]
    fake_prometheus({}, down=True)
    _, report = run_tick(resources, kube, NOW + 30, loop)
    status = kube.patches[0][1]["status"]
    assert report.failures and report.failures[0].startswith(prom.UNREACHABLE)
    assert status["tuning"]["applied"] == applied  # a patch without it would roll the pods back
    assert status["tuning"]["lastDecision"]["action"] == "keep"
    degraded = {c["type"]: c for c in status["conditions"]}["TuningDegraded"]
    assert degraded["status"] == "True" and degraded["reason"] == prom.UNREACHABLE
    assert "http://prometheus:9090" in degraded["message"]


def test_series_missing_is_reported_per_resource(fake_prometheus):
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a"), resource("b")], FakeKube()
    run_tick(resources, kube)
    by_name = {p[0].split("/")[-2]: p[1]["status"] for p in kube.patches}
    degraded = {c["type"]: c for c in by_name["b"]["conditions"]}["TuningDegraded"]
    assert degraded["reason"] == "SeriesMissing" and "specinfer_io_name='b'" in degraded["message"]
    assert "applied" not in by_name["b"]["tuning"]
    assert {c["type"]: c for c in by_name["a"]["conditions"]}["TuningDegraded"]["status"] == "False"


def test_queries_per_tick_do_not_grow_with_resources(fake_prometheus):
    counts = []
    for n in (1, 10):
        names = [f"r{i}" for i in range(n)]
        server = fake_prometheus(merge(*(high_acceptance(name) for name in names)))
        _, report = run_tick([resource(name) for name in names], FakeKube())
        assert report.resources == n
        counts.append((report.queries, server.calls))
    assert counts[0] == counts[1] == (len(build_queries(SETTINGS.labels.mapping(), 60)),) * 2


def test_interval_is_respected_and_off_mode_clears_once(fake_prometheus):
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a")], FakeKube()
    loop, _ = run_tick(resources, kube)
    apply_back(resources, kube)
    _, report = run_tick(resources, kube, NOW + 5, loop)  # interval 15 s: not due
    assert report.resources == 0 and not kube.patches
    resources[0]["spec"]["tuning"]["mode"] = "off"
    run_tick(resources, kube, NOW + 20, loop)
    assert kube.patches[0][1]["status"]["tuning"] == {"mode": "off"}  # applied dropped: the spec renders alone
    apply_back(resources, kube)
    resources[0]["status"]["tuning"] = {"mode": "off"}
    run_tick(resources, kube, NOW + 40, loop)
    assert not kube.patches
    untouched = [resource("b", mode="off")]  # never tuned: off writes nothing at all
    run_tick(untouched, kube, NOW + 60)
    assert not kube.patches


def test_operator_metrics_count_decisions_errors_and_query_latency(fake_prometheus):
    from specinfer.operator.plumbing import metrics
    def value(name, **labels):
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    decisions = value("specinfer_operator_tuning_decisions_total", action="recommend", mode="observe")
    queries = value("specinfer_operator_prometheus_query_seconds_count")
    unreachable = value("specinfer_operator_errors_total", component="tuning", reason=prom.UNREACHABLE)
    fake_prometheus(high_acceptance("a"))
    run_tick([resource("a", mode="observe")], FakeKube())
    assert value("specinfer_operator_tuning_decisions_total", action="recommend", mode="observe") == decisions + 1
    assert value("specinfer_operator_prometheus_query_seconds_count") == queries + len(
        build_queries(SETTINGS.labels.mapping(), 60))
    fake_prometheus({}, down=True)
    run_tick([resource("a")], FakeKube(), NOW + 60)
    assert value("specinfer_operator_errors_total", component="tuning", reason=prom.UNREACHABLE) == unreachable + 1

    class Queue:
        processed, errors = 7, 2

    class Controller:
        queue, kube = Queue(), type("Kube", (), {"requests": {"APPLY": 3}})()

    metrics.bind_controller(Controller())
    try:
        assert value("specinfer_operator_reconciles_total") == 7
        assert value("specinfer_operator_errors_total", component="reconcile", reason="ReconcileFailed") == 2
        assert value("specinfer_operator_api_requests_total", verb="APPLY") == 3
    finally:
        metrics.bind_controller(None)


def test_an_applied_config_the_edited_spec_forbids_is_dropped(fake_prometheus):
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a")], FakeKube()
    loop, _ = run_tick(resources, kube)
    apply_back(resources, kube)
    assert resources[0]["status"]["tuning"]["applied"]["numSpeculativeTokens"] >= 2
    resources[0]["spec"]["tuning"]["maxNumSpeculativeTokens"] = 1  # a user edit after the change
    resources[0]["spec"]["tuning"]["minNumSpeculativeTokens"] = 1
    run_tick(resources, kube, NOW + 30, loop)
    status = kube.patches[0][1]["status"]
    assert "applied" not in status["tuning"]
    degraded = {c["type"]: c for c in status["conditions"]}["TuningDegraded"]
    assert degraded["reason"] == "AppliedConfigDropped" and "above the spec's bound 1" in degraded["message"]


def test_holding_for_the_same_reason_writes_once(fake_prometheus):
    fake_prometheus({}, down=True)
    resources, kube = [resource("a")], FakeKube()
    loop, _ = run_tick(resources, kube)
    assert len(kube.patches) == 1
    apply_back(resources, kube)
    run_tick(resources, kube, NOW + 30, loop)
    assert kube.patches == []  # same hold, same conditions: no status churn


def test_auto_mode_with_no_restart_budget_is_in_place_only_and_says_so(fake_prometheus):
    """maxRestartsPerHour 0 means in place only: on an engine that is not retuned in place every change is a
    rollout, so the change is held and recommended, and status says why -- not a silent recommendation."""
    fake_prometheus(high_acceptance("a"))
    body = resource("a")
    body["spec"]["tuning"]["maxRestartsPerHour"] = 0
    kube = FakeKube()
    _, report = run_tick([body], kube)
    status = kube.patches[0][1]["status"]
    tuning = status["tuning"]
    assert report.actions["ns/a"] == "keep" and "applied" not in tuning and not kube.events
    reason = tuning["lastDecision"]["reason"]
    assert "maxRestartsPerHour is 0: in place only, and this change needs a rollout" in reason, reason
    assert "not retuned in place" in reason and "the tuner only recommends" in reason
    assert tuning["recommendation"]["numSpeculativeTokens"] != 3  # the change it would have made
    tuned = {c["type"]: c for c in status["conditions"]}["Tuned"]
    assert (tuned["status"], tuned["reason"]) == ("Unknown", "RestartBudget") and "in place only" in tuned["message"]


def test_no_restart_budget_still_retunes_in_place(fake_prometheus):
    fake_prometheus(merge(high_acceptance("a"), live_answers("a", DIGEST, taken_at=NOW - 600)))
    body = live_resource("a")
    body["spec"]["tuning"]["maxRestartsPerHour"] = 0
    kube = FakeKube()
    _, report = run_tick([body], kube)
    tuning = kube.patches[0][1]["status"]["tuning"]
    assert report.actions["ns/a"] in ("setK", "setSchedule"), tuning["lastDecision"]["reason"]
    assert tuning["applied"]["path"] == "inPlace" and tuning["restartsLastHour"] == 0


def test_a_standby_replica_neither_queries_nor_writes_and_resumes(fake_prometheus, caplog):
    caplog.set_level("INFO", logger="specinfer.operator.tuner")
    server = fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a"), resource("b", mode="off")], FakeKube()
    resources[1]["status"]["tuning"] = {"mode": "auto"}  # off mode would clear this: a write, were it active
    state = {"active": False}
    loop = TuningLoop(kube=kube, resources=lambda: resources, settings=SETTINGS, default_url="http://prometheus:9090",
                      events=kube, clock=lambda: NOW, active=lambda: state["active"])
    for offset in (0, 30, 60):
        _, report = run_tick(resources, kube, NOW + offset, loop)
        assert report.resources == 0 and report.queries == 0
    assert server.calls == 0 and not kube.patches and not kube.events
    assert sum("standby: not tuning" in r.message for r in caplog.records) == 1  # once per change, no spam
    state["active"] = True  # resumed: tunes normally again
    _, report = run_tick(resources, kube, NOW + 90, loop)
    assert server.calls > 0 and report.actions["ns/a"] in ("setK", "setSchedule")
    assert {p[0].split("/")[-2] for p in kube.patches} == {"a", "b"}


def test_garbage_the_policy_refuses_is_reported_once_and_keeps_the_last_metrics(fake_prometheus):
    """Counter-reset-like garbage (-1e308, +Inf quantiles) reaches the policy, which holds on invalid
    data: the status says so once, keeps the metrics of the last trustworthy window, and is not
    rewritten tick after tick while the garbage lasts."""
    fake_prometheus(high_acceptance("a"))
    resources, kube = [resource("a", mode="observe")], FakeKube()
    loop, _ = run_tick(resources, kube)
    apply_back(resources, kube)
    good_metrics = resources[0]["status"]["metrics"]
    garbage = {name: [{**sample, "value": [NOW, "+Inf" if name == "batchQuantiles" else "-1e308"]}
                      for sample in vector] for name, vector in high_acceptance("a").items()}
    fake_prometheus(garbage)
    run_tick(resources, kube, NOW + 30, loop)
    (path, body, _), = kube.patches
    status = body["status"]
    assert status["tuning"]["lastDecision"]["action"] == "keep"
    assert "NaN, infinite or negative" in status["tuning"]["lastDecision"]["reason"]
    assert {c["type"]: c for c in status["conditions"]}["Tuned"]["reason"] == "InvalidData"
    assert status["metrics"] == good_metrics  # not the refused window's numbers
    apply_back(resources, kube)
    run_tick(resources, kube, NOW + 60, loop)
    assert kube.patches == []  # the same hold again: nothing to write


def test_the_schema_check_catches_what_the_api_server_would_prune():
    """The check behind every patch here reads the CRD on disk, so it can fail: a misspelt key, a
    key the CRD does not declare, a value of the wrong type."""
    schema = status_schema("SpeculativeInference")
    assert schema_problems({"tuning": {"mode": "auto"}}, schema) == []
    assert schema_problems({"tuning": {"mdoe": "auto"}}, schema) == [
        "status.tuning.mdoe: not in the CRD's schema (the API server prunes it)"]
    assert schema_problems({"tuning": {"history": [{"action": "keep", "predictedGain": "high"}]}}, schema) == [
        "status.tuning.history[0].predictedGain: str where the schema says number"]


# --- retuning in place (issue 22) ----------------------------------------------------------------

DIGEST = "0123456789ab"


def live_resource(name: str) -> dict:
    body = resource(name)
    body["status"]["effective"]["liveSchedule"] = {"maxNumSpeculativeTokens": 8, "digest": DIGEST,
                                                   "configMap": f"{name}-schedule"}
    return body


def live_answers(name: str, digest: str, *, taken_at: float) -> dict:
    from tests.unit.test_tuner_observe import sample
    return {"liveSchedulePods": [sample("ns", name, 1.0, digest=digest)],
            "liveScheduleSince": [sample("ns", name, taken_at)],
            "liveScheduleErrors": [sample("ns", name, 0.0)]}


def test_a_published_schedule_no_engine_runs_yet_holds_the_policy(fake_prometheus):
    fake_prometheus(merge(high_acceptance("a"), live_answers("a", "ffffffffffff", taken_at=NOW - 600)))
    resources, kube = [live_resource("a")], FakeKube()
    _, report = run_tick(resources, kube)
    tuning = kube.patches[0][1]["status"]["tuning"]
    assert report.actions["ns/a"] == "keep"
    assert "have not all taken the published schedule 0123456789ab" in tuning["lastDecision"]["reason"]
    assert tuning["inForce"]["digest"] == "ffffffffffff" and "applied" not in tuning


def test_a_change_on_an_engine_retuned_in_place_restarts_nothing(fake_prometheus):
    fake_prometheus(merge(high_acceptance("a"), live_answers("a", DIGEST, taken_at=NOW - 600)))
    resources, kube = [live_resource("a")], FakeKube()
    _, report = run_tick(resources, kube)
    tuning = kube.patches[0][1]["status"]["tuning"]
    assert report.actions["ns/a"] in ("setK", "setSchedule"), tuning["lastDecision"]["reason"]
    assert tuning["applied"]["path"] == "inPlace" and tuning["lastDecision"]["path"] == "inPlace"
    assert tuning["restartsLastHour"] == 0 and json.loads(tuning["policyState"])["changes"] == []
    assert tuning["inForce"] == {"digest": DIGEST, "pods": 1, "reporting": 1, "since": rfc3339(NOW - 600),
                                 "errors": 0}


def test_the_window_starts_when_the_engine_took_the_schedule(fake_prometheus):
    # the engine took the schedule 20 s ago: a 60 s window would mix it with the one before
    fake_prometheus(merge(high_acceptance("a"), live_answers("a", DIGEST, taken_at=NOW - 20)))
    resources, kube = [live_resource("a")], FakeKube()
    run_tick(resources, kube)
    decision = kube.patches[0][1]["status"]["tuning"]["lastDecision"]
    assert decision["action"] == "keep" and "took effect" in decision["reason"], decision


def test_malformed_series_of_an_in_place_resource_are_reported_not_hidden_by_the_in_force_wait(fake_prometheus):
    from tests.unit.test_tuner_observe import sample
    answers = high_acceptance("a")
    answers["acceptedPerPosition"] = [sample("ns", "a", 1.0, position="200000000")]
    fake_prometheus(answers)  # and no live-schedule series at all
    resources, kube = [live_resource("a")], FakeKube()
    run_tick(resources, kube)
    degraded = {c["type"]: c for c in kube.patches[0][1]["status"]["conditions"]}["TuningDegraded"]
    assert degraded["status"] == "True" and "200000000" in degraded["message"], degraded
