"""Bad input on the real engine path ends in a condition and an Event naming the cause, not a silent crash loop.

Real operator, real control plane, the pod runner playing the kubelet (it owns the status of
engine pods: restarts, CrashLoopBackOff, the last termination message) and the real runtime /
vLLM in the engine environment:

- the engine environment (the image, locally) is missing -> ErrImageNeverPull, naming the command;
- the model directory does not exist -> `specinfer runtime` preflight exits 2 and its one line
  reaches the condition through the termination message;
- an EAGLE-3 head whose config names another target's hidden size -> preflight reads both configs
  (runtime/methods/drafter_fit.py) and exits 2 before vLLM loads a weight, naming the field and the cause;
- vLLM itself fails to start (a max model length the model cannot have) -> its log tail
  (FallbackToLogsOnError) reaches the condition.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from tests.support import condition, namespaced_stack, wait_for

pytestmark = pytest.mark.engine


def resource(namespace: str, name: str, model: str, *, extra_args: list[str] | None = None,
             speculation: dict | None = None) -> dict:
    runtime = {"engine": "vllm", "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]}
    if extra_args:
        runtime["extraArgs"] = extra_args
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": model, "servedModelName": "tiny"},
                     "speculation": speculation or {"method": "ngram", "numSpeculativeTokens": 2},
                     "hardware": {"accelerator": "cpu"}, "runtime": runtime, "tuning": {"mode": "off"}}}


@pytest.fixture
def failure_stack(cluster, prometheus, tmp_path, engine_env):
    with namespaced_stack(cluster, prometheus, tmp_path, "fail") as namespace_and_stack:
        yield namespace_and_stack


def failing(cluster, namespace: str, name: str, *, timeout: float, must_contain: str) -> dict:
    def ready_condition():
        result = cluster.kubectl("-n", namespace, "get", "speculativeinference", name, "-o", "json", check=False)
        if result.returncode != 0:
            return None
        ready = condition(json.loads(result.stdout), "Ready")
        return ready if ready.get("reason") == "EngineFailing" and must_contain in ready.get("message", "") else None

    def pods() -> str:
        return cluster.kubectl("-n", namespace, "get", "pods", "-o", "yaml", check=False).stdout[-4000:]

    return wait_for(ready_condition, timeout=timeout, interval=1, what=f"{name}: Ready=False EngineFailing", why=pods)


def events(cluster, namespace: str, name: str) -> list[dict]:
    result = cluster.kubectl("-n", namespace, "get", "events", "--field-selector",
                             f"involvedObject.name={name},reason=EngineFailing", "-o", "json")
    return json.loads(result.stdout)["items"]


def test_missing_engine_environment(failure_stack, cluster, monkeypatch, tmp_path):
    namespace, _ = failure_stack
    monkeypatch.setenv("SPECINFER_CACHE", str(tmp_path / "empty-cache"))  # the runner finds no engine env there
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(resource(namespace, "no-engine", "/tmp")))
    ready = failing(cluster, namespace, "no-engine", timeout=90, must_contain="specinfer engine install")
    assert "ErrImageNeverPull" in ready["message"] and "not installed" in ready["message"]
    assert events(cluster, namespace, "no-engine"), "no EngineFailing Event"


def misfit_head(tiny_models: Path, tmp_path: Path) -> Path:
    """The EAGLE-3 head of `models make`, its config saying it was trained for a 4096-wide target."""
    head = tmp_path / "eagle3-for-another-target"
    shutil.copytree(tiny_models / "eagle3-bigram", head)
    config = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps({**config, "target_hidden_size": 4096}))
    return head


def test_missing_model_directory_a_misfit_drafter_and_an_engine_that_fails_to_start(
        failure_stack, cluster, tiny_models, tmp_path):
    namespace, _ = failure_stack
    started = time.monotonic()
    head = misfit_head(tiny_models, tmp_path)
    eagle3 = {"method": "eagle3", "numSpeculativeTokens": 2, "draftModel": {"name": str(head)}}
    documents = [resource(namespace, "no-model", str(tiny_models / "no-such-model")),
                 resource(namespace, "misfit-head", str(tiny_models / "target"), speculation=eagle3),
                 resource(namespace, "bad-engine", str(tiny_models / "target"),
                          extra_args=["--max-model-len", "1000000"])]  # the tiny model has 2048 positions
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))

    ready = failing(cluster, namespace, "no-model", timeout=120, must_contain="does not exist")
    print(f"no-model: {ready['message']} ({time.monotonic() - started:.0f} s)")
    assert "exit code 2" in ready["message"] and "spec.model.name" in ready["message"]
    assert str(tiny_models / "no-such-model") in ready["message"]
    assert events(cluster, namespace, "no-model")

    # Preflight reads both configs before vLLM loads a weight: the field, the drafter and the cause.
    ready = failing(cluster, namespace, "misfit-head", timeout=120, must_contain="does not fit")
    print(f"misfit-head: {ready['message']} ({time.monotonic() - started:.0f} s)")
    assert "exit code 2" in ready["message"] and "spec.speculation.draftModel.name" in ready["message"]
    assert str(head) in ready["message"]
    assert "target_hidden_size 4096 does not match the target's hidden_size 256" in ready["message"]
    assert events(cluster, namespace, "misfit-head")

    ready = failing(cluster, namespace, "bad-engine", timeout=300, must_contain="max_model_len")
    print(f"bad-engine: {ready['message']} ({time.monotonic() - started:.0f} s)")
    assert "CrashLoopBackOff, exit code 1" in ready["message"]
    assert events(cluster, namespace, "bad-engine")
