"""A calibration on the real vLLM CPU engine: measured step costs, a comparison, the tuner on the measured table.

Everything is real: the control plane, `specinfer operator`, the Job controller, the pod runner
running each Job's pod (`specinfer calibrate --engine-config`, which starts `specinfer runtime` ->
`vllm serve` in the engine environment, drives it with the load generator and reads vLLM's
/metrics) and the serving pod of the target. The target serves ngram K=2 on the tiny models; the
calibration measures it (as `configured`), draftModel with the always-right draft (draft-same)
and no speculation. The always-right draft must measure acceptance 1 at every position -- the
engine's own counters, not the config, say so. A second calibration whose candidate cannot start
(its draft directory does not exist) fails with the engine's own words in its condition.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support import condition, namespaced_stack, wait_for

pytestmark = pytest.mark.engine

# Eager engines (no torch.compile) start faster on two shared cores; the target serves with the same runtime,
# so the calibration still measures what serves.
RUNTIME = {"engine": "vllm", "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}],
           "extraArgs": ["--enforce-eager"]}
LOAD = {"outputTokens": 64, "warmupSeconds": 2, "durationSeconds": 4}


def target(namespace: str, name: str, models: Path, speculation: dict, replicas: int = 1) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": str(models / "target"), "servedModelName": "tiny"},
                     "speculation": speculation, "hardware": {"accelerator": "cpu"}, "runtime": RUNTIME,
                     "replicas": replicas, "tuning": {"mode": "observe", "intervalSeconds": 5}}}


def calibration(namespace: str, name: str, target_name: str, candidates: list[dict], **spec) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInferenceCalibration",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"targetRef": {"name": target_name}, "candidates": candidates, "batchSizes": [1, 4],
                     "numSpeculativeTokens": [2], "load": LOAD, **spec}}


@pytest.fixture(scope="module")
def stack(cluster, prometheus, tmp_path_factory, engine_env):
    folder = tmp_path_factory.mktemp("calibration-engine")
    with namespaced_stack(cluster, prometheus, folder, "calib") as namespace_and_stack:
        yield namespace_and_stack


def get(cluster, namespace: str, kind: str, name: str) -> dict:
    return json.loads(cluster.kubectl("-n", namespace, "get", kind, name, "-o", "json").stdout)


def finished(cluster, namespace: str, name: str, timeout: float) -> dict:
    def phase():
        resource = get(cluster, namespace, "sical", name)
        return resource if (resource.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    return wait_for(phase, timeout=timeout, interval=2, what=f"calibration {name} to finish",
                    why=lambda: cluster.kubectl("-n", namespace, "get", "sical,jobs,pods", "-o", "wide").stdout)


def complete(url: str) -> dict:
    body = json.dumps({"model": "tiny", "prompt": "one two three one two three", "max_tokens": 16,
                       "temperature": 0, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.mark.timeout(1200)  # ~3-4 minutes on a quiet machine; two cores shared with other suites can triple it
def test_calibration_of_ngram_draft_model_and_none_reaches_status_and_the_tuner(stack, cluster, tiny_models):
    namespace, the_stack = stack
    started = time.monotonic()
    served = target(namespace, "tiny", tiny_models,
                    {"method": "ngram", "numSpeculativeTokens": 2, "promptLookup": {"min": 2, "max": 4}})
    draft = {"name": "draftmodel", "speculation": {"method": "draftModel",
                                                   "draftModel": {"name": str(tiny_models / "draft-same")}}}
    # the target starts serving while the calibration runs: its measurements never wait for it
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [served, calibration(namespace, "cal", "tiny", [draft], parallelism=2)]))
    wait_for(lambda: condition(get(cluster, namespace, "si", "tiny"), "Ready").get("status") == "True",
             timeout=900, interval=2, what="the target serving (its engine Ready)")
    print(f"target serving {time.monotonic() - started:.0f} s after apply")
    deployment = get(cluster, namespace, "deployment", "tiny")
    serving_pod = next(p for p in the_stack.runner.serving_pods() if p.labels.get("specinfer.io/name") == "tiny")

    done = finished(cluster, namespace, "cal", timeout=1100 - (time.monotonic() - started))
    print(f"calibration: {done['status'].get('progress')} engines in {time.monotonic() - started:.0f} s")
    status = done["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)[-4000:]
    by_name = {c["name"]: c for c in status["candidates"]}
    assert set(by_name) == {"configured", "draftmodel", "none"}
    for candidate in by_name.values():
        print(f"{candidate['name']}: " + "; ".join(
            f"K={p['numSpeculativeTokens']} B={p['batchSize']}: step {1000 * p['stepSeconds']:.1f} ms, "
            f"{p['tokensPerStep']:.2f} tokens/step, {p['tokensPerSecond']:.0f} tokens/s" for p in candidate["points"]))
    (always_right,) = by_name["draftmodel"]["acceptance"]
    assert always_right["drafts"] > 0 and always_right["perPosition"] == [1.0, 1.0]
    assert all(p["tokensPerStep"] > 2.5 for p in by_name["draftmodel"]["points"])  # 1 + 2 accepted, every step
    assert all(0.9 < p["tokensPerStep"] < 1.1 for p in by_name["none"]["points"])
    assert {row["name"] for row in status["comparison"]} == set(by_name)
    print(f"recommendation: {status['recommendation']['message']}")

    si = get(cluster, namespace, "si", "tiny")
    table = si["status"]["calibration"]
    assert table["name"] == "cal" and table["method"] == "ngram"
    assert sorted({c["numSpeculativeTokens"] for c in table["stepCost"]}) == [0, 2] and len(table["stepCost"]) == 4
    def step_cost() -> dict:
        return ((get(cluster, namespace, "si", "tiny").get("status") or {}).get("tuning") or {}).get("stepCost") or {}

    used = wait_for(lambda: step_cost().get("source") == "calibration" and step_cost(), timeout=60, interval=1,
                    what="the tuner to use the measured table (status.tuning.stepCost)", why=lambda: str(step_cost()))
    print(f"status.tuning.stepCost: {used}")
    assert used["calibration"] == "cal" and used["cells"] == 4 and used["fitError"] >= 0

    after = json.loads(cluster.kubectl("-n", namespace, "get", "deployment", "tiny", "--show-managed-fields", "-o",
                                       "json").stdout)
    assert after["metadata"]["generation"] == deployment["metadata"]["generation"] == 1
    assert after["spec"]["template"] == deployment["spec"]["template"]
    managers = {entry["manager"] for entry in after["metadata"]["managedFields"]}
    assert "specinfer-calibration" not in managers, managers
    still = [p for p in the_stack.runner.serving_pods() if p.labels.get("specinfer.io/name") == "tiny"]
    assert [p.uid for p in still] == [serving_pod.uid]
    assert complete(f"http://127.0.0.1:{serving_pod.port}")["usage"]["completion_tokens"] == 16


def test_a_candidate_that_cannot_start_fails_the_run_naming_the_cause(stack, cluster, tiny_models):
    namespace, _ = stack
    missing = tiny_models / "no-such-draft"
    plain = target(namespace, "plain", tiny_models, {"method": "none"}, replicas=0)  # its spec only: no engine
    broken = {"name": "broken", "speculation": {"method": "draftModel", "draftModel": {"name": str(missing)}}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
        [plain, calibration(namespace, "broken", "plain", [broken])]))
    done = finished(cluster, namespace, "broken", timeout=180)
    failed = condition(done, "Failed")
    print(f"Failed: {failed.get('reason')}: {failed.get('message')}")
    assert done["status"]["phase"] == "Failed" and failed["status"] == "True" and failed["reason"] == "EngineFailed"
    assert failed["message"].startswith("engine broken K=2 (draftModel):")
    assert "spec.speculation.draftModel.name" in failed["message"] and str(missing) in failed["message"]
    assert "calibration" not in (get(cluster, namespace, "si", "plain").get("status") or {})
