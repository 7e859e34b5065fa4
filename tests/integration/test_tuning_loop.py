"""The tuning loop end to end with real components (issue 7, item 6).

Local control plane + `specinfer operator` (subprocess) + simulator pods run by the pod runner
+ a real Prometheus scraping them, driven by closed-loop HTTP load. One module-scoped setup
serves every test (the runs are the slow part): three resources at once --

  obs  observe mode, low load: a recommendation appears, nothing changes;
  lo   auto mode, low load, K=1 and high acceptance: the tuner raises K at small batch sizes;
  hi   auto mode, heavy load (about 20 concurrent): the tuner programs K=0 at those batch sizes;

then Prometheus is stopped and the loop must hold and say so. Prometheus drops the `specinfer:`
series of `obs` at scrape time, so that resource is tuned from vLLM's standard series alone. The simulator runs the
`cpu-small` preset (speculation stops paying from batch ~14) with timeScale so that windows fill fast.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from harness_operator import (  # noqa: F401  (fixtures)
    OperatorProcess,
    apply,
    condition,
    get,
    operator_crds,
    simulator_resource,
    wait_until,
)

from specinfer.dev.cluster.pod_runner import PodRunner
from specinfer.dev.cluster.ports import free_port
from specinfer.dev.cluster.prometheus import PrometheusServer
from specinfer.dev.demo.load import Phase, PhasedLoad
from specinfer.runtime.methods.schedule import effective_k
from tests.support import wait_for

pytestmark = pytest.mark.integration

WINDOW = 12
TUNER_CONFIG = {"tuning": {"windowSeconds": WINDOW, "tickSeconds": 1,
                           "policy": {"minSteps": 200, "confirmations": 1, "cooldownSeconds": 15,
                                      "maxStalenessSeconds": 30}}}
LOW_CONCURRENCY, HEAVY_CONCURRENCY = 2, 20
# The heavy load's prompts are short, so that this module tests K = 0 at large batch sizes and not the
# prefill term: a 128-token prompt adds ~0.1 s to the step that prefills it (cpu-small), ~15% of a K=1 step at
# batch 20, and at nice 10 beside two busy cores (as beside the engine tests) the starved clients move where
# those steps fall. Before the fit had a prefill term that kept K=1 where off gains +15% (CI run 34); what is
# left of it is in docs/tuner.md, "Known limits". The low loads send 128-token prompts.
HEAVY_PROMPT_TOKENS = 8


def resource(name: str, *, mode: str, k: int, time_scale: float) -> dict:
    """The operator tests' simulator resource, on a CPU-sized cost model, with tuning on short clocks."""
    body = simulator_resource(name, k=k)
    spec = body["spec"]
    del spec["replicas"]
    spec["runtime"]["simulator"] = {"timeScale": time_scale, "costModel": "cpu-small", "maxNumSeqs": 64,
                                    "workload": "chat", "seed": 3}
    spec["tuning"] = {"mode": mode, "intervalSeconds": 5, "minSamples": 200, "maxRestartsPerHour": 6}
    return body


class PrometheusWithoutPluginFor(PrometheusServer):
    """Drops the `specinfer:` series of one resource at scrape time: that engine looks like a
    vLLM without our stat-logger plugin, so the loop must fall back to vLLM's series."""

    def __init__(self, *args, plugin_less: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.plugin_less = plugin_less

    def config(self) -> dict:
        config = super().config()
        config["scrape_configs"][0]["metric_relabel_configs"] = [{
            "source_labels": ["specinfer_io_name", "__name__"], "separator": ";",
            "regex": f"{re.escape(self.plugin_less)};specinfer:.*", "action": "drop"}]
        return config


class Setup:
    def __init__(self, cluster, namespace: str, workdir: Path):
        self.cluster, self.namespace, self.workdir = cluster, namespace, workdir
        self.suffix = uuid.uuid4().hex[:5]
        self.names = {role: f"{role}-{self.suffix}" for role in ("obs", "lo", "hi", "extra1", "extra2")}
        self.prometheus = PrometheusWithoutPluginFor(workdir / "prometheus", scrape_interval="1s", log=lambda m: None,
                                                     plugin_less=self.names["obs"])
        self.runner: PodRunner | None = None
        self.runner_thread: threading.Thread | None = None
        self.stop_runner = threading.Event()
        self.loads: list[PhasedLoad] = []
        self.operator: OperatorProcess | None = None
        self.metrics_port = free_port()

    def runner_log(self, message: str) -> None:
        with open(self.workdir / "runner.log", "a") as log:
            log.write(message + "\n")

    def endpoints(self, name: str):
        prefix = f"{self.namespace}/{name}-"
        return lambda: [url for key, url in self.runner.endpoints().items() if key.startswith(prefix)]

    def start(self) -> None:
        self.prometheus.start()
        selector = f"specinfer.io/name in ({','.join(self.names.values())})"  # only this module's pods
        self.runner = PodRunner(self.cluster.kubeconfig, self.workdir / "pods", prometheus=self.prometheus,
                                label_selector=selector, log=self.runner_log)
        self.runner_thread = threading.Thread(target=self.runner.run, args=(self.stop_runner,),
                                              kwargs={"interval": 0.5}, daemon=True)
        self.runner_thread.start()
        config = self.workdir / "operator.yaml"
        config.write_text(yaml.safe_dump(TUNER_CONFIG))
        self.operator = OperatorProcess(self.cluster, self.namespace, self.workdir / "operator.log",
                                        "--standalone", "--config", str(config), "--prometheus-url",
                                        self.prometheus.url, "--metrics-port", str(self.metrics_port))
        self.operator.wait_for_log("tuning loop started")

    def load(self, name: str, concurrency: int, prompt_tokens: int = 128) -> PhasedLoad:
        load = PhasedLoad(self.endpoints(name), "llama", (Phase("steady", concurrency, 3600),),
                          prompt_tokens=prompt_tokens, output_tokens=256)
        load.start()
        self.loads.append(load)
        return load

    def get(self, role: str) -> dict:
        return get(self.cluster, self.namespace, "speculativeinference", self.names[role])

    def operator_metrics(self) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        out = {}
        for line in text.splitlines():
            match = re.match(r"^(specinfer_operator_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
            if match:
                out[match.group(1)] = float(match.group(2))
        return out

    def stop(self) -> None:
        for load in self.loads:
            load._stop.set()
        if self.operator is not None:
            self.operator.stop()
        self.stop_runner.set()
        if self.runner_thread is not None:
            self.runner_thread.join(timeout=90)  # it stops every local pod on its way out
        self.prometheus.stop()


@pytest.fixture(scope="module")
def setup(cluster, operator_crds, tmp_path_factory):
    namespace = f"tune-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    state = Setup(cluster, namespace, tmp_path_factory.mktemp("tuning"))
    try:
        state.start()
        names = state.names
        apply(cluster, namespace, resource(names["obs"], mode="observe", k=1, time_scale=5),
              resource(names["lo"], mode="auto", k=1, time_scale=5),
              resource(names["hi"], mode="auto", k=2, time_scale=2))
        state.load(names["obs"], LOW_CONCURRENCY)
        state.load(names["lo"], LOW_CONCURRENCY)
        state.load(names["hi"], HEAVY_CONCURRENCY, prompt_tokens=HEAVY_PROMPT_TOKENS)
        state.started = time.monotonic()
        yield state
    finally:
        log = state.operator.log() if state.operator is not None else ""
        state.stop()
        print(f"\n--- operator log tail ---\n{log[-3000:]}")
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def tuning(resource: dict | None) -> dict:
    return ((resource or {}).get("status") or {}).get("tuning") or {}


def applied_k_at(resource: dict, batch_size: int) -> int | None:
    applied = tuning(resource).get("applied")
    if not applied:
        return None
    schedule = [(e["minBatchSize"], e["maxBatchSize"], e["numSpeculativeTokens"])
                for e in applied.get("schedule") or []]
    return effective_k(batch_size, applied["numSpeculativeTokens"], schedule or None)


def describe(resource: dict | None) -> str:
    status = (resource or {}).get("status") or {}
    return json.dumps({"decision": tuning(resource).get("lastDecision"), "applied": tuning(resource).get("applied"),
                       "conditions": status.get("conditions"), "metrics": status.get("metrics")}, indent=1)[:3000]


def test_observe_mode_writes_a_recommendation_and_changes_nothing(setup):
    name = setup.names["obs"]
    before = setup.get("obs")
    deployment = wait_until(lambda: get(setup.cluster, setup.namespace, "deployment", name, check=False), 30,
                            what="obs Deployment")
    template_before = deployment["spec"]["template"]
    found = wait_until(lambda: (r := setup.get("obs")) and tuning(r).get("recommendation") and r, 150, 1,
                       what="a recommendation in observe mode")
    recommendation = tuning(found)["recommendation"]
    print(f"\nobserve mode recommends {recommendation} ({tuning(found)['lastDecision']['reason']})")
    assert tuning(found)["mode"] == "observe" and "applied" not in tuning(found)
    assert tuning(found)["signals"] == "vllm"  # its specinfer: series are dropped: vLLM's standard series only
    assert "perPositionAcceptance" in found["status"]["metrics"]
    assert found["status"]["metrics"]["meanBatchSize"] <= LOW_CONCURRENCY + 0.5
    assert found["spec"] == before["spec"] and found["metadata"]["generation"] == before["metadata"]["generation"]
    after = get(setup.cluster, setup.namespace, "deployment", name)
    assert after["spec"]["template"] == template_before  # no rollout
    assert found["status"]["effective"]["numSpeculativeTokens"] == 1


def test_auto_mode_raises_k_under_low_load_and_high_acceptance(setup):
    before = setup.get("lo")
    found = wait_until(lambda: (r := setup.get("lo")) and (applied_k_at(r, 1) or 0) > 1 and r, 180, 1,
                       what="lo: a larger K applied at batch size 1")
    print(f"\nlow load: applied {tuning(found)['applied']} after {time.monotonic() - setup.started:.0f}s; "
          f"{tuning(found)['lastDecision']['reason']}")
    events = get(setup.cluster, setup.namespace, "events")["items"]
    reasons = {e["reason"] for e in events if e["involvedObject"]["name"] == setup.names["lo"]}
    assert any(r.startswith("Tuning") for r in reasons), reasons
    # auto mode: the engine is retuned in place. The reconciler publishes the tuned schedule
    # (status.effective follows), the pod runner swaps the mounted file as a kubelet does, the
    # simulated engine takes it between two steps and says so (status.tuning.inForce, from its series)
    deployment = get(setup.cluster, setup.namespace, "deployment", setup.names["lo"])

    def in_force(r: dict) -> bool:
        live = (r["status"].get("effective") or {}).get("liveSchedule") or {}
        return ((r["status"].get("effective") or {}).get("numSpeculativeTokens")
                == tuning(r)["applied"]["numSpeculativeTokens"]
                and live.get("digest") and (tuning(r).get("inForce") or {}).get("digest") == live["digest"])

    rolled = wait_until(lambda: (r := setup.get("lo")) and in_force(r) and r, 60,
                        what=f"lo: the tuned schedule in force in the engine ({describe(found)[:300]})")
    assert rolled["spec"] == before["spec"]
    assert rolled["metadata"]["generation"] == before["metadata"]["generation"]
    assert tuning(found)["applied"]["path"] == "inPlace" and tuning(found)["lastDecision"]["path"] == "inPlace"
    assert tuning(rolled)["restartsLastHour"] == 0 and tuning(rolled)["history"]
    after = get(setup.cluster, setup.namespace, "deployment", setup.names["lo"])
    assert after["spec"]["template"] == deployment["spec"]["template"]  # no rollout, no restart


def test_auto_mode_programs_k0_at_large_batch_sizes_under_heavy_load(setup):
    before = setup.get("hi")

    def k0_programmed():
        r = setup.get("hi")
        batch = ((r or {}).get("status") or {}).get("metrics", {}).get("meanBatchSize") or 0
        return r if batch >= 10 and applied_k_at(r, round(batch)) == 0 else None

    # a timeout says what the tuner last decided and applied (CI run 34 timed out here once, without it)
    found = wait_for(k0_programmed, timeout=180, interval=1, what="hi: K=0 applied at the observed batch size",
                     why=lambda: describe(setup.get("hi")))
    print(f"\nheavy load (mean batch {found['status']['metrics']['meanBatchSize']}): applied "
          f"{tuning(found)['applied']}; {tuning(found)['lastDecision']['reason']}; "
          f"signals {tuning(found).get('signals')}")
    assert found["spec"] == before["spec"]
    assert found["metadata"]["generation"] == before["metadata"]["generation"]
    assert tuning(found)["signals"] == "specinfer"  # the simulator exports the plugin's series
    name = setup.names["hi"]
    steps = (f'sum(increase(specinfer:engine_steps_total{{specinfer_io_name="{name}", k="0"}}[5s]))')
    ran = setup.prometheus.wait_for(steps, lambda r: float(r[0]["value"][1]) > 0, timeout=60)
    print(f"engine steps without drafting in the last 5 s: {float(ran[0]['value'][1]):.0f}")
    deployment = get(setup.cluster, setup.namespace, "deployment", name)
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0 and strategy["maxSurge"] == 1  # one replica at a time, never fewer


def test_queries_per_tick_stay_constant_as_resources_are_added(setup):
    wait_until(lambda: setup.operator_metrics().get("specinfer_operator_tuning_ticks_total"), 30,
               what="a tuning tick")
    with_three = setup.operator_metrics()["specinfer_operator_tuning_queries_per_tick"]
    apply(setup.cluster, setup.namespace,
          resource(setup.names["extra1"], mode="observe", k=2, time_scale=1),
          resource(setup.names["extra2"], mode="observe", k=3, time_scale=1))
    wait_until(lambda: tuning(get(setup.cluster, setup.namespace, "speculativeinference", setup.names["extra2"]))
               .get("lastDecision"), 30, what="the added resources in a tick")
    time.sleep(6)
    metrics = setup.operator_metrics()
    with_five = metrics["specinfer_operator_tuning_queries_per_tick"]
    ticks = metrics["specinfer_operator_tuning_ticks_total"]
    sent = sum(v for k, v in metrics.items() if k.startswith("specinfer_operator_prometheus_queries_total"))
    resources = metrics.get('specinfer_operator_tuning_resources{mode="observe"}', 0) + \
        metrics.get('specinfer_operator_tuning_resources{mode="auto"}', 0)
    print(f"\nqueries per tick: {with_three:.0f} with 3 resources, {with_five:.0f} with {resources:.0f}; "
          f"{sent:.0f} queries over {ticks:.0f} ticks = {sent / ticks:.2f} per tick")
    assert resources == 5
    assert metrics["specinfer_operator_reconciles_total"] > 0
    assert metrics["specinfer_operator_prometheus_query_seconds_count"] == sent
    assert sum(v for k, v in metrics.items() if k.startswith("specinfer_operator_tuning_decisions_total")) >= ticks
    assert with_three == with_five
    # every counted tick sent the same set; the tick in flight at the scrape may not have sent all of it yet
    assert with_five * (ticks - 1) < sent <= with_five * ticks


def test_prometheus_stopped_holds_and_reports(setup):
    before = {role: setup.get(role) for role in ("lo", "hi")}
    setup.prometheus.stop()

    def degraded():
        r = setup.get("lo")
        return r if condition(r, "TuningDegraded").get("reason") == "PrometheusUnreachable" else None

    found = wait_until(degraded, 60, 1, what="TuningDegraded=PrometheusUnreachable")
    print(f"\nPrometheus stopped: {condition(found, 'TuningDegraded')['message']}")
    assert condition(found, "TuningDegraded")["status"] == "True"
    assert tuning(found)["lastDecision"]["action"] == "keep"
    time.sleep(6)  # a few more ticks without Prometheus: the applied configs hold
    for role, earlier in before.items():
        now = setup.get(role)
        assert tuning(now).get("applied") == tuning(earlier).get("applied"), role
        assert now["spec"] == earlier["spec"] and now["metadata"]["generation"] == earlier["metadata"]["generation"]
    errors = {k: v for k, v in setup.operator_metrics().items() if "errors_total" in k}
    assert any("PrometheusUnreachable" in k for k in errors), errors
