"""The dashboard's queries and the alerting rules against a real run (issue 17, items 3-4).

Local control plane + `specinfer operator` (subprocess, with prices configured and its /metrics
scraped) + simulator pods run by the pod runner + a real Prometheus that scrapes both and
loads the generated rules file, driven by closed-loop HTTP load. Two resources:

  tuned     auto mode, K=1, high acceptance at low load: the tuner raises K (changes, restarts,
            a realised gain, a cost saving);
  collapse  observe mode, K=3: healthy for a minute, then its drafter breaks (a simulator phase with
            acceptanceCollapsed, declared in the resource) and the collapse alert must fire.

Every panel query must return data. Prometheus evaluates `for:` in wall-clock time, so the test
loads the rules with every `for` cut to a few seconds (promtool test rules checks the real
durations in virtual time, tests/unit/promtool/); expressions and windows are the shipped ones.
SPECINFER_DASHBOARD_PNG=docs/img/dashboard.png keeps the picture of the run for the README.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from harness_operator import OperatorProcess, apply, get, operator_crds, simulator_resource  # noqa: F401

from specinfer.dev.cluster.pod_runner import PodRunner
from specinfer.dev.cluster.ports import free_port
from specinfer.dev.cluster.prometheus import PrometheusServer
from specinfer.dev.demo.load import Phase, PhasedLoad
from specinfer.monitoring.cli import CHART_FILES, RULES_FILE
from specinfer.monitoring.panels import panels, resolve
from specinfer.monitoring.picture import write_picture
from tests.support import condition, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WINDOW = 12
OPERATOR_CONFIG = {
    "cost": {"currency": "USD", "accelerators": {"nvidia": 2.5}},
    "tuning": {"windowSeconds": WINDOW, "tickSeconds": 1,
               "policy": {"minSteps": 200, "confirmations": 1, "cooldownSeconds": 15, "maxStalenessSeconds": 30}},
}
RATE_INTERVAL = "30s"  # what Grafana's $__rate_interval gives at a 1 s scrape and a short time range
HOLD = "3s"
TIME_SCALE = 5
HEALTHY_SIMULATED_SECONDS = 300  # a minute of wall time before the collapse resource's drafter breaks


def resource(name: str, *, mode: str, k: int, collapse: bool = False) -> dict:
    body = simulator_resource(name, k=k)
    spec = body["spec"]
    del spec["replicas"]
    spec["runtime"]["simulator"] = {"timeScale": TIME_SCALE, "costModel": "cpu-small", "maxNumSeqs": 64,
                                    "workload": "chat", "seed": 7}
    if collapse:
        spec["runtime"]["simulator"]["phases"] = [
            {"workload": "chat", "durationSeconds": HEALTHY_SIMULATED_SECONDS},
            {"workload": "chat", "durationSeconds": 86400, "acceptanceCollapsed": True}]
    spec["tuning"] = {"mode": mode, "intervalSeconds": 5, "minSamples": 200, "maxRestartsPerHour": 6}
    return body


class PrometheusWithRules(PrometheusServer):
    """Debian's Prometheus loading the generated rules file, `for` shortened (see the module doc)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        rules = yaml.safe_load((REPO / CHART_FILES / RULES_FILE).read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule["for"] = HOLD
        self.rules_file = self.workdir / "rules.yaml"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rules_file.write_text(yaml.safe_dump(rules))

    def config(self) -> dict:
        return {**super().config(), "rule_files": [str(self.rules_file)]}

    def alerts(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v1/alerts", timeout=5) as response:
            return json.load(response)["data"]["alerts"]


class Run:
    def __init__(self, cluster, namespace: str, workdir: Path):
        self.cluster, self.namespace, self.workdir = cluster, namespace, workdir
        suffix = uuid.uuid4().hex[:5]
        self.names = {"tuned": f"tuned-{suffix}", "collapse": f"collapse-{suffix}"}
        self.prometheus = PrometheusWithRules(workdir / "prometheus", scrape_interval="1s", log=lambda m: None)
        self.runner: PodRunner | None = None
        self.stop_runner = threading.Event()
        self.runner_thread: threading.Thread | None = None
        self.loads: list[PhasedLoad] = []
        self.operator: OperatorProcess | None = None
        self.started = time.time()

    def endpoints(self, role: str):
        prefix = f"{self.namespace}/{self.names[role]}-"
        return lambda: [url for key, url in self.runner.endpoints().items() if key.startswith(prefix)]

    def start(self) -> None:
        self.prometheus.start()
        selector = f"specinfer.io/name in ({','.join(self.names.values())})"
        self.runner = PodRunner(self.cluster.kubeconfig, self.workdir / "pods", prometheus=self.prometheus,
                                label_selector=selector, log=lambda m: None)
        self.runner_thread = threading.Thread(target=self.runner.run, args=(self.stop_runner,),
                                              kwargs={"interval": 0.5}, daemon=True)
        self.runner_thread.start()
        config = self.workdir / "operator.yaml"
        config.write_text(yaml.safe_dump(OPERATOR_CONFIG))
        port = free_port()
        self.operator = OperatorProcess(self.cluster, self.namespace, self.workdir / "operator.log", "--standalone",
                                        "--config", str(config), "--prometheus-url", self.prometheus.url,
                                        "--metrics-port", str(port))
        self.operator.wait_for_log("tuning loop started")
        self.prometheus.add_target("operator", f"127.0.0.1:{port}")  # the operator's own /metrics, as a ServiceMonitor
        apply(self.cluster, self.namespace, resource(self.names["tuned"], mode="auto", k=1),
              resource(self.names["collapse"], mode="observe", k=3, collapse=True))
        for role in self.names:
            load = PhasedLoad(self.endpoints(role), "llama", (Phase("steady", 2, 3600),), output_tokens=256)
            load.start()
            self.loads.append(load)

    def query(self, expr: str) -> list[dict]:
        resource_regex = "|".join(self.names.values())
        return self.prometheus.query(resolve(expr, namespace=self.namespace, resource=resource_regex,
                                             rate_interval=RATE_INTERVAL))

    def stop(self) -> None:
        for load in self.loads:
            load._stop.set()
        if self.operator is not None:
            self.operator.stop()
        self.stop_runner.set()
        if self.runner_thread is not None:
            self.runner_thread.join(timeout=90)
        self.prometheus.stop()


@pytest.fixture(scope="module")
def run(cluster, operator_crds, tmp_path_factory):
    namespace = f"mon-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    state = Run(cluster, namespace, tmp_path_factory.mktemp("monitoring"))
    try:
        state.start()
        yield state
    finally:
        log = state.operator.log() if state.operator is not None else ""
        state.stop()
        print(f"\n--- operator log tail ---\n{log[-2000:]}")
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def finite_values(result: list[dict]) -> list[float]:
    return [v for v in (float(s["value"][1]) for s in result) if math.isfinite(v)]


def test_every_dashboard_query_returns_data(run):
    queries = [(panel.title, query) for panel in panels() for query in panel.queries]
    missing: dict[str, str] = {}

    def all_answered():
        missing.clear()
        for title, query in queries:
            if not finite_values(run.query(query.expr)):
                missing[title] = query.legend
        return not missing

    wait_for(all_answered, timeout=300, interval=3, what="data for every dashboard query",
             why=lambda: f"no data yet: {missing}")
    for title, query in queries:
        result = run.query(query.expr)
        shown = ", ".join(f"{s['metric'].get('name') or s['metric'].get('specinfer_io_name', '')}"
                          f"{('/' + s['metric']['position']) if 'position' in s['metric'] else ''}="
                          f"{float(s['value'][1]):.4g}" for s in result[:6])
        print(f"{title} [{query.legend}]: {shown}")
    tuned = run.names["tuned"]
    cost = run.query(panels()[-1].queries[0].expr)
    assert {s["metric"]["name"] for s in cost} == set(run.names.values())
    assert all(s["metric"]["currency"] == "USD" for s in cost)
    status = get(run.cluster, run.namespace, "speculativeinference", tuned)["status"]
    exported = next(float(s["value"][1]) for s in cost if s["metric"]["name"] == tuned)
    # the gauge and status.cost are one figure, read a scrape apart
    assert exported == pytest.approx(status["cost"]["perMillionTokens"], rel=0.5)
    assert status["cost"]["pricePerHour"] == 2.5  # one replica, one nvidia device at 2.5/h
    print(f"status.cost of {tuned}: {json.dumps(status['cost'], sort_keys=True)}")
    wide = run.cluster.kubectl("get", "si", "-n", run.namespace, "-o", "wide").stdout
    print(wide)
    assert "COST/MTOK" in wide.splitlines()[0]
    k_panel = next(p for p in panels() if p.title == "K in force by batch size").queries[0].expr

    def k_in_force_matches_status():  # a rollout may land between the two reads: poll
        effective = get(run.cluster, run.namespace, "speculativeinference", tuned)["status"]["effective"]
        shown = [float(s["value"][1]) for s in run.query(k_panel) if s["metric"]["name"] == tuned]
        return shown and max(shown) == effective["numSpeculativeTokens"]

    wait_for(k_in_force_matches_status, timeout=30, interval=1, what="K in force = status.effective's K")


def test_an_injected_acceptance_collapse_fires_the_collapse_alert(run):
    name = run.names["collapse"]

    def firing(alertname: str, **labels: str) -> list[dict]:
        return [a for a in run.prometheus.alerts() if a["labels"]["alertname"] == alertname and a["state"] == "firing"
                and all(a["labels"].get(k) == v for k, v in labels.items())]

    (alert,) = wait_for(lambda: firing("SpecinferAcceptanceCollapsed", specinfer_io_name=name), timeout=300,
                        interval=2, what="SpecinferAcceptanceCollapsed firing",
                        why=lambda: json.dumps(run.prometheus.alerts())[:2000])
    fired = time.time()
    print(f"\nSpecinferAcceptanceCollapsed fired {fired - run.started:.0f}s into the run (the drafter breaks after "
          f"{HEALTHY_SIMULATED_SECONDS / TIME_SCALE:.0f}s of pod time): {alert['annotations']['summary']}")
    # the same rule's expression was healthy before the phase changed: the alert fired on the collapse
    first_position = ('sum by (specinfer_io_name) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total'
                      f'{{namespace="{run.namespace}", specinfer_io_name="{name}", position="0"}}[30s])) / sum by '
                      f'(specinfer_io_name) (rate(vllm:spec_decode_num_drafts_total{{namespace="{run.namespace}", '
                      f'specinfer_io_name="{name}"}}[30s]))')
    history = run.prometheus.client().custom_query_range(
        first_position, start_time=datetime.fromtimestamp(run.started, UTC),
        end_time=datetime.fromtimestamp(fired, UTC), step="5s")
    values = [float(v) for _, v in history[0]["values"] if math.isfinite(float(v))]
    print(f"first-position acceptance over the run: from {max(values):.0%} down to {values[-1]:.1%}")
    assert max(values) > 0.6 and values[-1] < 0.05
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["namespace"] == run.namespace
    assert not firing("SpecinferAcceptanceCollapsed", specinfer_io_name=run.names["tuned"])
    # the tuner saw it too: TuningDegraded=AcceptanceCollapsed, and its alert carries the reason
    wait_for(lambda: firing("SpecinferTuningDegraded", name=name, reason="AcceptanceCollapsed"), timeout=60,
             interval=2, what="SpecinferTuningDegraded (AcceptanceCollapsed) firing")
    resource = get(run.cluster, run.namespace, "speculativeinference", name)
    assert condition(resource, "TuningDegraded")["reason"] == "AcceptanceCollapsed"


def test_a_picture_of_the_dashboard_from_the_run(run, tmp_path):
    path = Path(os.environ.get("SPECINFER_DASHBOARD_PNG") or tmp_path / "dashboard.png")
    if not path.is_absolute():
        path = REPO / path
    write_picture(run.prometheus.url, path, namespace=run.namespace, resource="|".join(run.names.values()),
                  start=run.started, end=time.time(), step=5, rate_interval=RATE_INTERVAL,
                  title="specinfer dashboard: two simulated resources (tuned: auto, collapse: observe, drafter "
                        "broken midway)")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 50_000
    print(f"\ndashboard picture: {path}")
