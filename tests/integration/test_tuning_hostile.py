"""A hostile tenant next to a healthy one, with the real operator, Prometheus and simulator pods (issue 15).

The hostile resource names its own Prometheus (spec.tuning.prometheus.url): a server that answers,
tick after tick, with series whose labels our engines never export (position="200000000", a
batch-size bucket that does not exist), with a body larger than the operator reads, and with
something that is not JSON at all. The healthy resource, in the same namespace and the same
operator, must keep tuning as if alone; the hostile one must say why it is not tuned; the operator
must neither die nor grow.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from harness_operator import OperatorProcess, apply, condition, get, operator_crds, wait_until  # noqa: F401
from test_tuning_loop import applied_k_at, resource, tuning

from specinfer.dev.cluster.pod_runner import PodRunner
from specinfer.dev.cluster.prometheus import PrometheusServer
from specinfer.dev.demo.load import Phase, PhasedLoad

pytestmark = pytest.mark.integration

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
CONFIG = {"tuning": {"windowSeconds": 12, "tickSeconds": 1, "maxResponseBytes": MAX_RESPONSE_BYTES,
                     "policy": {"minSteps": 200, "confirmations": 1, "cooldownSeconds": 15,
                                "maxStalenessSeconds": 30}}}
KINDS = ("labels", "oversized", "not-json")


class HostilePrometheus:
    """Answers every query; the kind of hostility changes every few seconds."""

    def __init__(self, namespace: str, name: str) -> None:
        self.seen: dict[str, int] = dict.fromkeys(KINDS, 0)

        def series() -> dict:
            metric = {"namespace": namespace, "specinfer_io_name": name, "position": "200000000",
                      "batch_size": "a-lot", "k": "1", "quantile": "0.5"}
            return {"status": "success", "data": {"resultType": "vector",
                                                  "result": [{"metric": metric, "value": [time.time(), "1"]}]}}

        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                kind = KINDS[int(time.monotonic() // 4) % len(KINDS)]
                owner.seen[kind] += 1
                if kind == "labels":
                    body = json.dumps(series()).encode()
                elif kind == "oversized":
                    body = b'{"status": "success", "padding": "' + b"0" * (2 * MAX_RESPONSE_BYTES) + b'"}'
                else:
                    body = b"<html>this is not Prometheus</html>"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the operator stopped reading at its limit, as it should

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_a_hostile_tenant_costs_only_itself(cluster, operator_crds, tmp_path):
    namespace = f"hostile-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    suffix = uuid.uuid4().hex[:5]
    good_name, evil_name = f"good-{suffix}", f"evil-{suffix}"
    prometheus = PrometheusServer(tmp_path / "prometheus", scrape_interval="1s", log=lambda m: None)
    hostile = HostilePrometheus(namespace, evil_name)
    stop_runner = threading.Event()
    runner = PodRunner(cluster.kubeconfig, tmp_path / "pods", prometheus=prometheus,
                       label_selector=f"specinfer.io/name={good_name}", log=lambda m: None)
    runner_thread = threading.Thread(target=runner.run, args=(stop_runner,), kwargs={"interval": 0.5}, daemon=True)
    operator = load = None
    try:
        prometheus.start()
        runner_thread.start()
        config = tmp_path / "operator.yaml"
        # the admin allows the tenant's Prometheus (issue 15: the tuner queries no other URL)
        config.write_text(yaml.safe_dump({**CONFIG, "prometheus": {"allowedUrls": [hostile.url]}}))
        operator = OperatorProcess(cluster, namespace, tmp_path / "operator.log", "--standalone", "--config",
                                   str(config), "--prometheus-url", prometheus.url)
        operator.wait_for_log("tuning loop started")
        evil = resource(evil_name, mode="auto", k=1, time_scale=5)
        evil["spec"]["tuning"]["prometheus"] = {"url": hostile.url}
        apply(cluster, namespace, resource(good_name, mode="auto", k=1, time_scale=5), evil)
        prefix = f"{namespace}/{good_name}-"
        load = PhasedLoad(lambda: [u for k, u in runner.endpoints().items() if k.startswith(prefix)], "llama",
                          (Phase("steady", 2, 3600),), output_tokens=256)
        load.start()
        started = time.monotonic()

        messages: dict[str, set[str]] = {}

        def every_hostility_reported():
            found = condition(get(cluster, namespace, "speculativeinference", evil_name), "TuningDegraded")
            if found.get("status") == "True":
                messages.setdefault(found["reason"], set()).add(found["message"])
            text = json.dumps(sorted(m for ms in messages.values() for m in ms))
            return all(part in text for part in ("position='200000000'", "exceeds", "not a Prometheus query"))
        wait_until(every_hostility_reported, 120, 1, what="the hostile resource degraded for each kind of answer")
        print(f"\nhostile answers seen {hostile.seen}; the hostile resource said:")
        for reason, texts in sorted(messages.items()):
            for text in sorted(texts):
                print(f"  TuningDegraded {reason}: {text}")
        assert set(messages) == {"SeriesMalformed", "PrometheusQueryFailed"}

        good = wait_until(lambda: (r := get(cluster, namespace, "speculativeinference", good_name))
                          and (applied_k_at(r, 1) or 0) > 1 and r, 180, 1,
                          what="the healthy resource tuned (a larger K at batch size 1) next to the hostile one")
        print(f"healthy resource after {time.monotonic() - started:.0f}s: applied {tuning(good)['applied']}; "
              f"{tuning(good)['lastDecision']['reason']}")
        assert condition(good, "TuningDegraded")["status"] == "False"
        assert operator.proc.poll() is None
        rss = rss_mb(operator.proc.pid)
        print(f"operator RSS {rss:.0f} MB after {time.monotonic() - started:.0f}s of hostile answers")
        assert rss < 300, f"operator RSS {rss:.0f} MB"
        assert "Traceback" not in operator.log()
    finally:
        if load is not None:
            load._stop.set()
        if operator is not None:
            operator.stop()
        stop_runner.set()
        runner_thread.join(timeout=90)
        prometheus.stop()
        hostile.close()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
