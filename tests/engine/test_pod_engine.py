"""The real pod path: a SpeculativeInference on `cpu` with engine `vllm` runs the real `vllm serve`.

Everything is real: the local control plane, `specinfer operator`, Debian's Prometheus (file-based
discovery), and the pod runner, which runs the rendered pod's own command (`specinfer runtime`:
config -> preflight -> argv -> exec `vllm serve`) inside the cached engine environment that
models the CPU runtime image. Two resources start side by side (ngram and draftModel on the tiny
local models); each must serve OpenAI completions through the runner's serving endpoints, and
Prometheus must hold both vLLM's own `vllm:` series and the `specinfer:` series of the stat-logger
plugin, which the live engine loaded through its entry point.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from specinfer.demo.stack import Stack
from tests.support import condition, wait_for

pytestmark = pytest.mark.engine

STARTUP_TIMEOUT = 420  # two engines starting at once on two shared cores: ~1-3 minutes each
REPETITIVE = "one two three four five one two three four five one two three four five one two three"


def resource(namespace: str, name: str, models: Path, speculation: dict) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": str(models / "target"), "servedModelName": "tiny"},
                     "speculation": speculation,
                     "hardware": {"accelerator": "cpu"},
                     # a small fixed KV cache: the 24 GiB machine is shared
                     "runtime": {"engine": "vllm", "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]},
                     "tuning": {"mode": "off"}}}


def complete(base_url: str, prompt: str, max_tokens: int = 48) -> dict:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{base_url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200
        return json.loads(response.read())


@pytest.fixture(scope="module")
def engine_stack(cluster, prometheus, tmp_path_factory, engine_env):
    namespace = f"engine-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    stack = Stack(cluster.kubeconfig, prometheus, tmp_path_factory.mktemp("engine-stack"), namespaces=(namespace,),
                  operator_args=("--standalone", "-n", namespace), log=print)
    stack.start()
    try:
        yield namespace, stack
    finally:
        stack.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_ngram_and_draft_model_serve_and_export_both_series(engine_stack, tiny_models, prometheus, cluster):
    namespace, stack = engine_stack
    wanted = {
        "tiny-ngram": {"method": "ngram", "numSpeculativeTokens": 3, "promptLookup": {"min": 2, "max": 4}},
        "tiny-draft": {"method": "draftModel", "draftModel": {"name": str(tiny_models / "draft-same")},
                       "numSpeculativeTokens": 3},
    }
    started = time.monotonic()
    documents = [resource(namespace, name, tiny_models, speculation) for name, speculation in wanted.items()]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))

    def serving() -> dict[str, str]:
        return {pod.labels.get("specinfer.io/name"): f"http://127.0.0.1:{pod.port}"
                for pod in stack.runner.serving_pods()}

    def pod_logs() -> str:
        return "\n".join(f"--- {pod.name}: {pod.record.log if pod.record else 'not started'}\n"
                         + (Path(pod.record.log).read_text()[-3000:] if pod.record else "")
                         for pod in stack.runner.pods.values())

    endpoints = wait_for(lambda: serving() if set(serving()) == set(wanted) else None, timeout=STARTUP_TIMEOUT,
                         interval=2, what="both engine pods to pass their readiness probe", why=pod_logs)
    print(f"both engines ready {time.monotonic() - started:.0f} s after apply")
    for pod in stack.runner.pods.values():
        log = Path(pod.record.log).read_text()
        assert "specinfer runtime: exec vllm serve" in log  # the runtime entrypoint exec'd the real engine
        assert "specinfer-telemetry -> specinfer.runtime.telemetry.vllm_plugin:SpecinferStatLogger" in log

    for name in wanted:  # the runner owns these pods' status: Ready follows the engine, not kwok
        def ready(name=name):
            result = cluster.kubectl("-n", namespace, "get", "speculativeinference", name, "-o", "json")
            return condition(json.loads(result.stdout), "Ready").get("status") == "True"
        wait_for(ready, timeout=60, interval=1, what=f"{name}: Ready=True")

    for url in endpoints.values():
        answer = complete(url, REPETITIVE)
        assert answer["model"] == "tiny" and answer["usage"]["completion_tokens"] == 48, answer
        assert answer["choices"][0]["text"], answer

    for name in wanted:
        selector = f'namespace="{namespace}",specinfer_io_name="{name}"'
        vllm_drafts = prometheus.wait_for(f"sum(vllm:spec_decode_num_draft_tokens_total{{{selector}}})",
                                          lambda r: float(r[0]["value"][1]) > 0, timeout=60)
        # the plugin's counters reach /metrics at vLLM's next log() (VLLM_LOG_STATS_INTERVAL, 10 s)
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
    print(f"ngram + draftModel served and scraped {time.monotonic() - started:.0f} s after apply")
