"""The real pod path: a SpeculativeInference on `cpu` with engine `vllm` runs the real `vllm serve`.

Everything is real: the local control plane, `specinfer operator`, Debian's Prometheus (file-based
discovery), and the pod runner, which runs the rendered pod's own command (`specinfer runtime`:
config -> preflight -> argv -> exec `vllm serve`) inside the cached engine environment that
models the CPU runtime image. Two resources start side by side (ngram, and draftModel with the
target as its own draft and a Dynamic SD schedule, on the tiny local models); one module-scoped
pair of engines serves every test:

- each serves OpenAI completions through the runner's serving endpoints, and Prometheus holds both
  vLLM's own `vllm:` series and the `specinfer:` series of the stat-logger plugin, which the live
  engine loaded through its entry point;
- the schedule in the spec is in force: vLLM's own counters show K=3 drafted per request-step at
  batch size 1 and K=1 at batch size 8;
- the plugin's per-position series agree with vLLM's counters over the same window.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml

from specinfer.dev.demo.stack import Stack
from tests.engine.engine_client import Metrics, complete, minus, per_position, rounds, settled
from tests.support import condition, wait_for

pytestmark = pytest.mark.engine

STARTUP_TIMEOUT = 420  # two engines starting at once on two shared cores: ~1-3 minutes each
REPETITIVE = "one two three four five one two three four five one two three four five one two three"
# K=3 for a request running alone, K=1 from two requests on: vLLM's Dynamic SD schedule
SCHEDULE = [{"minBatchSize": 1, "maxBatchSize": 1, "numSpeculativeTokens": 3},
            {"minBatchSize": 2, "maxBatchSize": 64, "numSpeculativeTokens": 1}]
WANTED = {
    "tiny-ngram": lambda models: {"method": "ngram", "numSpeculativeTokens": 3, "promptLookup": {"min": 2, "max": 4}},
    "tiny-draft": lambda models: {"method": "draftModel", "draftModel": {"name": str(models / "draft-same")},
                                  "numSpeculativeTokens": 3, "schedule": SCHEDULE},
}
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
PLUGIN_DRAFTS = "specinfer:spec_decode_num_draft_tokens_per_pos_total"
PLUGIN_ACCEPTED = "specinfer:spec_decode_num_accepted_tokens_per_pos_total"


def resource(namespace: str, name: str, models: Path, speculation: dict) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": str(models / "target"), "servedModelName": "tiny"},
                     "speculation": speculation,
                     "hardware": {"accelerator": "cpu"},
                     # a small fixed KV cache (the 24 GiB machine is shared); vLLM's log() -- where the
                     # plugin flushes what an idle engine has not yet -- every second, not every ten
                     "runtime": {"engine": "vllm", "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
                                                           {"name": "VLLM_LOG_STATS_INTERVAL", "value": "1"}]},
                     "tuning": {"mode": "off"}}}


class Engines:
    """The module's two engine pods, started once."""

    def __init__(self, namespace: str, stack: Stack, endpoints: dict[str, str], started: float):
        self.namespace, self.stack, self.endpoints, self.started = namespace, stack, endpoints, started


def pod_logs(stack: Stack) -> str:
    return "\n".join(f"--- {pod.name}: {pod.record.log if pod.record else 'not started'}\n"
                     + (Path(pod.record.log).read_text()[-3000:] if pod.record else "")
                     for pod in stack.runner.pods.values())


@pytest.fixture(scope="module")
def engines(cluster, prometheus, tmp_path_factory, engine_env, tiny_models):
    namespace = f"engine-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    stack = Stack(cluster.kubeconfig, prometheus, tmp_path_factory.mktemp("engine-stack"), namespaces=(namespace,),
                  operator_args=("--standalone", "-n", namespace), log=print)
    stack.start()
    try:
        started = time.monotonic()
        documents = [resource(namespace, name, tiny_models, speculation(tiny_models))
                     for name, speculation in WANTED.items()]
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))

        def serving() -> dict[str, str]:
            return {pod.labels.get("specinfer.io/name"): f"http://127.0.0.1:{pod.port}"
                    for pod in stack.runner.serving_pods()}

        endpoints = wait_for(lambda: serving() if set(serving()) == set(WANTED) else None, timeout=STARTUP_TIMEOUT,
                             interval=2, what="both engine pods to pass their readiness probe",
                             why=lambda: pod_logs(stack))
        print(f"both engines ready {time.monotonic() - started:.0f} s after apply")
        yield Engines(namespace, stack, endpoints, started)
    finally:
        stack.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_ngram_and_draft_model_serve_and_export_both_series(engines, prometheus, cluster):
    namespace, stack = engines.namespace, engines.stack
    for pod in stack.runner.pods.values():
        log = Path(pod.record.log).read_text()
        assert "specinfer runtime: exec vllm serve" in log  # the runtime entrypoint exec'd the real engine
        assert "specinfer-telemetry -> specinfer.runtime.telemetry.vllm_plugin:SpecinferStatLogger" in log

    for name in WANTED:  # the runner owns these pods' status: Ready follows the engine, not kwok
        def ready(name=name):
            result = cluster.kubectl("-n", namespace, "get", "speculativeinference", name, "-o", "json")
            return condition(json.loads(result.stdout), "Ready").get("status") == "True"
        wait_for(ready, timeout=60, interval=1, what=f"{name}: Ready=True")

    for url in engines.endpoints.values():
        answer = complete(url, REPETITIVE)
        assert answer["model"] == "tiny" and answer["usage"]["completion_tokens"] == 48, answer
        assert answer["choices"][0]["text"], answer

    for name in WANTED:
        selector = f'namespace="{namespace}",specinfer_io_name="{name}"'
        vllm_drafts = prometheus.wait_for(f"sum(vllm:spec_decode_num_draft_tokens_total{{{selector}}})",
                                          lambda r: float(r[0]["value"][1]) > 0, timeout=60)
        # the plugin's counters reach /metrics at vLLM's next log() (VLLM_LOG_STATS_INTERVAL)
        plugin_drafts = prometheus.wait_for(
            f"sum(specinfer:spec_decode_num_draft_tokens_per_pos_total{{{selector}}})",
            lambda r: float(r[0]["value"][1]) > 0, timeout=60)
        print(f"{name}: vllm draft tokens {vllm_drafts[0]['value'][1]}, "
              f"specinfer per-position draft tokens {plugin_drafts[0]['value'][1]}")
    accepted = prometheus.query(f'sum(vllm:spec_decode_num_accepted_tokens_total{{namespace="{namespace}",'
                                f'specinfer_io_name="tiny-draft"}})')
    drafted = prometheus.query(f'sum(vllm:spec_decode_num_draft_tokens_total{{namespace="{namespace}",'
                               f'specinfer_io_name="tiny-draft"}})')
    assert float(accepted[0]["value"][1]) == float(drafted[0]["value"][1])  # the target as its own draft
    print(f"ngram + draftModel served and scraped {time.monotonic() - engines.started:.0f} s after apply")


def test_the_schedule_in_the_spec_is_in_force_in_the_engines_counters(engines):
    """vLLM's own per-position counters, batch size 1 vs 8: the draft is the target itself, so every
    drafted token is accepted and accepted-per-position counts the drafts that reached each position."""
    url = engines.endpoints["tiny-draft"]
    names = (ACCEPTED, DRAFTS, PLUGIN_DRAFTS)
    before = settled(url, names)
    rounds(url, REPETITIVE, concurrency=1, count=4)
    alone = settled(url, names)
    rounds(url, REPETITIVE, concurrency=8, count=2)
    busy = settled(url, names)

    def k_per_step(after: Metrics, then: Metrics) -> float:
        return (after.total(DRAFT_TOKENS) - then.total(DRAFT_TOKENS)) / (after.total(DRAFTS) - then.total(DRAFTS))

    at_one, at_eight = minus(per_position(alone, ACCEPTED), per_position(before, ACCEPTED)), \
        minus(per_position(busy, ACCEPTED), per_position(alone, ACCEPTED))
    print(f"batch 1: accepted per position {at_one}, draft tokens per request-step {k_per_step(alone, before):.2f}")
    print(f"batch 8: accepted per position {at_eight}, draft tokens per request-step {k_per_step(busy, alone):.2f}")
    assert len(at_one) == 3 and at_one[0] > 0 and at_one[2] >= 0.9 * at_one[0]  # K=3 at batch 1
    assert k_per_step(alone, before) == pytest.approx(3.0, rel=0.05)
    assert at_eight[0] > 0 and at_eight[1] <= 0.1 * at_eight[0] and at_eight[2] <= 0.1 * at_eight[0]  # K=1 at 8
    assert k_per_step(busy, alone) < 1.2
    engines.schedule_window = (before, busy)  # the plugin test compares over the same window


def test_the_plugins_series_agree_with_vllms_counters(engines):
    """Over one window (two scrapes, each one instant for every series): the plugin's draft tokens per
    position sum to vLLM's draft tokens, and its accepted tokens per position equal vLLM's."""
    url = engines.endpoints["tiny-draft"]
    window = getattr(engines, "schedule_window", None)
    if window is None:  # run alone: make a window of its own
        before = settled(url, (ACCEPTED, PLUGIN_DRAFTS))
        rounds(url, REPETITIVE, concurrency=1, count=2)
        rounds(url, REPETITIVE, concurrency=8, count=1)
        window = (before, settled(url, (ACCEPTED, PLUGIN_DRAFTS)))
    before, after = window
    vllm_draft_tokens = after.total(DRAFT_TOKENS) - before.total(DRAFT_TOKENS)
    plugin_drafts = minus(per_position(after, PLUGIN_DRAFTS), per_position(before, PLUGIN_DRAFTS))
    vllm_accepted = minus(per_position(after, ACCEPTED), per_position(before, ACCEPTED))
    plugin_accepted = minus(per_position(after, PLUGIN_ACCEPTED), per_position(before, PLUGIN_ACCEPTED))
    print(f"vllm: draft tokens {vllm_draft_tokens:.0f}, accepted per position {vllm_accepted}")
    print(f"specinfer plugin: drafts per position {plugin_drafts} (sum {sum(plugin_drafts):.0f}), "
          f"accepted per position {plugin_accepted}")
    assert vllm_draft_tokens > 0
    assert sum(plugin_drafts) == vllm_draft_tokens
    assert plugin_accepted == vllm_accepted
    assert plugin_drafts[0] > plugin_drafts[1]  # the schedule drafted fewer positions at batch 8
