"""SpeculativeInferenceCalibration on the real control plane, the real operator and simulator engines.

What Kubernetes and the operator do with a calibration, fast (the simulator in scaled time; the
real engine is tests/engine/test_calibration_engine.py): admission refuses bad specs naming the
field; a missing target, a candidate the catalogue refuses on the target's accelerator and
unreadable prompts end in conditions naming the field; a run creates one Job per engine (never a
pod the target's Service selects), reports progress, lands its comparison in its own status and
its step-cost table in the target's status.calibration, the tuner reports that it uses the table,
and the target's Deployment is never written.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from specinfer.dev.cluster import ports, processes
from specinfer.dev.cluster.http_probe import http_ok
from specinfer.dev.demo.stack import specinfer_executable
from tests.support import condition, namespaced_stack, wait_for

pytestmark = pytest.mark.integration

SIMULATOR = {"engine": "simulator", "simulator": {"costModel": "cpu-small", "timeScale": 10, "maxNumSeqs": 64,
                                                  "workload": "code"}}
FAST_LOAD = {"outputTokens": 32, "warmupSeconds": 1, "durationSeconds": 2}


def target(namespace: str, name: str) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"model": {"name": "tiny/model"}, "speculation": {"method": "draftModel",
                                                                       "draftModel": {"name": "tiny/draft"},
                                                                       "numSpeculativeTokens": 2},
                     "hardware": {"accelerator": "cpu"}, "runtime": SIMULATOR,
                     "tuning": {"mode": "observe", "intervalSeconds": 5}}}


def calibration(namespace: str, name: str, target_name: str, **spec) -> dict:
    return {"apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInferenceCalibration",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"targetRef": {"name": target_name}, **spec}}


@pytest.fixture(scope="module")
def stack(cluster, prometheus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibration-stack")
    with namespaced_stack(cluster, prometheus, folder, "cal") as namespace_and_stack:
        yield namespace_and_stack


def get(cluster, namespace: str, kind: str, name: str) -> dict | None:
    result = cluster.kubectl("-n", namespace, "get", kind, name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def apply(cluster, *documents: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))


def test_admission_refuses_bad_specs_naming_the_field(stack, cluster):
    namespace, _ = stack
    bad = calibration(namespace, "bad", "t", batchSizes=[4, 1],
                      candidates=[{"name": "configured", "speculation": {"method": "ngram"}},
                                  {"speculation": {"method": "draftModel"}}])
    result = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert result.returncode != 0
    for expected in ("spec.batchSizes must be ascending",
                     "spec.candidates[].name configured is reserved",
                     "spec.candidates[1].speculation.draftModel"):
        assert expected in result.stderr, result.stderr
    apply(cluster, calibration(namespace, "immutable", "t", candidates=[{"speculation": {"method": "ngram"}}]))
    patched = cluster.kubectl("-n", namespace, "patch", "sical", "immutable", "--type", "merge", "-p",
                              '{"spec":{"batchSizes":[2]}}', check=False)
    assert patched.returncode != 0 and "spec is immutable" in patched.stderr
    cluster.kubectl("-n", namespace, "delete", "sical", "immutable")


def waiting_or_failed(cluster, namespace: str, name: str, reason: str) -> dict:
    def found():
        resource = get(cluster, namespace, "sical", name)
        progressing = condition(resource, "Progressing")
        return resource if progressing.get("reason") == reason else None
    return wait_for(found, timeout=60, interval=0.5, what=f"{name}: Progressing reason {reason}")


def test_bad_input_ends_in_conditions_naming_the_field(stack, cluster):
    namespace, _ = stack
    apply(cluster, target(namespace, "bad-input-target"))
    cluster.kubectl("-n", namespace, "create", "configmap", "taken-engines", "--from-literal=a=b")  # not the operator's
    other_image = target(namespace, "other-image")
    other_image["spec"]["runtime"] = {**SIMULATOR, "image": "registry.example/not-allowed:1"}
    apply(cluster, other_image)
    apply(cluster,
          calibration(namespace, "image", "other-image"),
          calibration(namespace, "taken", "bad-input-target", load=FAST_LOAD),
          calibration(namespace, "no-target", "does-not-exist"),
          calibration(namespace, "refused", "bad-input-target", candidates=[{"speculation": {"method": "dspark"}}]),
          calibration(namespace, "too-long", "bad-input-target",
                      candidates=[{"speculation": {"method": "ngram"}, "numSpeculativeTokens": [2, 40]}]),
          calibration(namespace, "no-prompts", "bad-input-target",
                      prompts={"configMapRef": {"name": "missing", "key": "prompts.txt"}}))
    resource = waiting_or_failed(cluster, namespace, "no-target", "TargetNotFound")
    assert resource["status"]["phase"] == "Pending"
    assert "spec.targetRef.name: SpeculativeInference does-not-exist not found" in \
        condition(resource, "Progressing")["message"]

    resource = waiting_or_failed(cluster, namespace, "refused", "InvalidCandidate")
    failed = condition(resource, "Failed")
    assert resource["status"]["phase"] == "Failed" and failed["status"] == "True"
    assert failed["message"].startswith("spec.candidates[0].speculation") and "cpu" in failed["message"], failed

    resource = waiting_or_failed(cluster, namespace, "too-long", "InvalidCandidate")
    assert "spec.candidates[0].numSpeculativeTokens: K 40 outside 1..16" in condition(resource, "Failed")["message"]

    resource = waiting_or_failed(cluster, namespace, "no-prompts", "PromptsUnreadable")
    progressing = condition(resource, "Progressing")["message"]
    assert "spec.prompts.configMapRef.name: ConfigMap missing not found" in progressing
    cluster.kubectl("-n", namespace, "create", "configmap", "missing", "--from-literal=prompts.txt=  \n\n")
    resource = wait_for(lambda: (r := get(cluster, namespace, "sical", "no-prompts"))
                        and "no prompt in it" in condition(r, "Progressing").get("message", "") and r,
                        timeout=60, interval=0.5, what="no-prompts: the empty prompts named")
    resource = waiting_or_failed(cluster, namespace, "image", "ImageNotAllowed")
    assert condition(resource, "Progressing")["message"].startswith(
        "the target's spec.runtime.image registry.example/not-allowed:1 is not allowed by the operator configuration")
    resource = waiting_or_failed(cluster, namespace, "taken", "ChildConflict")
    assert "ConfigMap taken-engines exists and is not this calibration's" in condition(resource, "Failed")["message"]
    assert json.loads(cluster.kubectl("-n", namespace, "get", "configmap", "taken-engines", "-o", "json")
                      .stdout)["data"] == {"a": "b"}  # never applied over
    events = json.loads(cluster.kubectl("-n", namespace, "get", "events", "--field-selector",
                                        "involvedObject.name=no-target", "-o", "json").stdout)["items"]
    assert any(e["reason"] == "TargetNotFound" and e["type"] == "Warning" for e in events)
    jobs = json.loads(cluster.kubectl("-n", namespace, "get", "jobs", "-o", "json").stdout)["items"]
    assert jobs == []  # nothing ran for any of them
    cluster.kubectl("-n", namespace, "delete", "sical", "no-target", "refused", "too-long", "no-prompts", "taken",
                    "image")


def test_a_run_measures_compares_and_hands_the_table_to_the_tuner(stack, cluster):
    namespace, the_stack = stack
    apply(cluster, target(namespace, "served"))
    wait_for(lambda: condition(get(cluster, namespace, "si", "served"), "Ready").get("status") == "True",
             timeout=60, what="the target Ready")
    deployment = get(cluster, namespace, "deployment", "served")
    pods_before = {p["metadata"]["uid"] for p in json.loads(cluster.kubectl(
        "-n", namespace, "get", "pods", "-l", "specinfer.io/name=served", "-o", "json").stdout)["items"]}
    started = time.monotonic()
    apply(cluster, calibration(namespace, "run", "served", candidates=[{"speculation": {"method": "ngram"}}],
                               batchSizes=[1, 4], numSpeculativeTokens=[1, 3], load=FAST_LOAD, parallelism=2))

    seen_running = wait_for(lambda: (r := get(cluster, namespace, "sical", "run"))
                            and (r.get("status") or {}).get("phase") == "Running" and r,
                            timeout=60, interval=0.3, what="the calibration Running")
    assert seen_running["status"]["progress"].endswith("/5")  # configured K=1,3 + ngram K=1,3 + none
    wide = cluster.kubectl("-n", namespace, "get", "sical", "run", "-o", "wide").stdout
    assert "Running" in wide and "/5" in wide, wide

    done = wait_for(lambda: (r := get(cluster, namespace, "sical", "run"))
                    and (r.get("status") or {}).get("phase") in ("Succeeded", "Failed") and r,
                    timeout=240, interval=1, what="the calibration to finish",
                    why=lambda: cluster.kubectl("-n", namespace, "get", "sical,jobs,pods", "-o", "wide").stdout)
    print(f"calibration finished in {time.monotonic() - started:.0f} s: {done['status'].get('progress')}")
    status = done["status"]
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)[:3000]
    assert condition(done, "Complete")["status"] == "True"
    by_name = {c["name"]: c for c in status["candidates"]}
    assert set(by_name) == {"configured", "ngram", "none"}
    assert sorted(by_name["configured"]["measured"]) == [1, 3]
    points = by_name["configured"]["points"]
    assert {(p["numSpeculativeTokens"], p["batchSize"]) for p in points} == {(1, 1), (1, 4), (3, 1), (3, 4)}
    at_1 = {p["numSpeculativeTokens"]: p for p in points if p["batchSize"] == 1}
    assert at_1[3]["stepSeconds"] > at_1[1]["stepSeconds"]  # three draft passes cost more than one
    assert [row["numSpeculativeTokens"] for row in by_name["ngram"]["acceptance"]] == [1, 3]
    assert {row["name"] for row in status["comparison"]} == {"configured", "ngram", "none"}
    recommendation = status["recommendation"]
    assert recommendation["message"] and "Not applied" in recommendation["message"]
    print(f"recommendation: {recommendation['message']}")

    si = get(cluster, namespace, "si", "served")
    summary = si["status"]["calibration"]
    assert summary["name"] == "run" and summary["method"] == "draftModel"
    assert {c["numSpeculativeTokens"] for c in summary["stepCost"]} == {0, 1, 3}
    step_cost = wait_for(lambda: ((get(cluster, namespace, "si", "served").get("status") or {}).get("tuning") or {})
                         .get("stepCost", {}).get("source") == "calibration"
                         and get(cluster, namespace, "si", "served")["status"]["tuning"]["stepCost"],
                         timeout=60, interval=1, what="the tuner to report the calibration's table")
    assert step_cost["calibration"] == "run" and step_cost["cells"] == len(summary["stepCost"])
    print(f"status.tuning.stepCost: {step_cost}")

    after = json.loads(cluster.kubectl("-n", namespace, "get", "deployment", "served", "--show-managed-fields", "-o",
                                       "json").stdout)
    assert after["metadata"]["generation"] == deployment["metadata"]["generation"]
    assert after["spec"]["template"] == deployment["spec"]["template"]
    assert "specinfer-calibration" not in {entry["manager"] for entry in after["metadata"]["managedFields"]}
    pods_after = {p["metadata"]["uid"] for p in json.loads(cluster.kubectl(
        "-n", namespace, "get", "pods", "-l", "specinfer.io/name=served", "-o", "json").stdout)["items"]}
    assert pods_after == pods_before
    calibration_pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-l",
                                                  "specinfer.io/calibration=run", "-o", "json").stdout)["items"]
    assert calibration_pods and all("specinfer.io/name" not in p["metadata"]["labels"] for p in calibration_pods)
    # the calibration controller's children are written by it alone ("Who writes what")
    for kind in ("jobs", "configmaps"):
        children = json.loads(cluster.kubectl("-n", namespace, "get", kind, "-l", "specinfer.io/calibration=run",
                                              "--show-managed-fields", "-o", "json").stdout)["items"]
        managers = {entry["manager"] for child in children for entry in child["metadata"]["managedFields"]
                    if entry.get("operation") in ("Apply", "Update")}
        assert children and "specinfer-calibration" in managers and "specinfer-operator" not in managers, \
            (kind, managers)
    events = json.loads(cluster.kubectl("-n", namespace, "get", "events", "-o", "json").stdout)["items"]
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events}
    assert {("run", "EngineStarted"), ("run", "EngineMeasured"), ("run", "Completed"), ("served", "Calibrated")} \
        <= reasons


def test_the_cli_measures_endpoints_and_compares_them(tmp_path):
    """`specinfer calibrate` against three simulators (one method each), JSON out: what a user runs by hand."""
    servers = {"draftModel": ["--method", "draftModel", "-k", "2"], "ngram": ["--method", "ngram", "-k", "3"],
               "none": ["--method", "none"]}
    records, urls = [], {}
    try:
        for name, args in servers.items():
            port = ports.free_port()
            records.append(processes.start(f"sim-{name}", [specinfer_executable(), "sim", *args, "--cost-model",
                                                           "cpu-small", "--time-scale", "10", "--workload", "code",
                                                           "--port", str(port)], log_dir=tmp_path))
            urls[name] = f"http://127.0.0.1:{port}"
        for url in urls.values():
            wait_for(lambda url=url: http_ok(f"{url}/health", timeout=0.5), timeout=30, what=f"{url} up")
        (tmp_path / "prompts.txt").write_text("one two three one two three\n" + '{"prompt": "alpha beta alpha"}\n')
        result = subprocess.run(
            [specinfer_executable(), "calibrate", *[a for n, u in urls.items() for a in ("-e", f"{n}={u}")],
             "--batch-sizes", "1,4", "--warmup", "0.5", "--duration", "1.5", "--output-tokens", "32",
             "--time-scale", "10", "--prompts", str(tmp_path / "prompts.txt"), "--json"],
            capture_output=True, text=True, timeout=120)
    finally:
        for record in records:
            processes.stop(record)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    endpoints = {e["name"]: e for e in report["endpoints"]}
    assert {n: e["numSpeculativeTokens"] for n, e in endpoints.items()} == {"draftModel": 2, "ngram": 3, "none": 0}
    for endpoint in endpoints.values():
        assert [p["batchSize"] for p in endpoint["points"]] == [1, 4]
        assert all(p["stepSeconds"] > 0.02 for p in endpoint["points"])  # cpu-small's floor is 30 ms (simulated)
    assert [len(row["perPosition"]) for row in endpoints["ngram"]["acceptance"]] == [3]
    assert {c["numSpeculativeTokens"] for c in report["stepCost"]["cells"]} == {0, 2}  # the reference + none
    assert report["recommendation"]["message"].endswith("Not applied: change spec.speculation yourself if you "
                                                         "agree.")
    assert {row["name"] for row in report["comparison"]} == {"configured", "ngram", "none"}


def test_a_stopped_calibration_pod_stops_its_engine(tmp_path):
    """SIGTERM to `specinfer calibrate --engine-config` (how a pod is stopped) stops the engine it started."""
    port = ports.free_port()
    runtime_config = {"apiVersion": "specinfer.io/v1alpha1", "kind": "RuntimeConfig", "name": "t", "namespace": "n",
                      "spec": {"model": {"name": "tiny/model"}, "speculation": {"method": "ngram",
                                                                                 "numSpeculativeTokens": 2},
                               "hardware": {"accelerator": "cpu"},
                               "runtime": {"port": port, **SIMULATOR}}}
    (tmp_path / "runtime.json").write_text(json.dumps(runtime_config))
    driver = processes.start("calibrate", [specinfer_executable(), "calibrate", "--engine-config",
                                           str(tmp_path / "runtime.json"), "--warmup", "300"], log_dir=tmp_path)
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/health", timeout=0.5), timeout=60, what="the engine up")
        time.sleep(1.0)  # the load is running
        processes.stop(driver, timeout=30)
        assert not processes.is_running(driver)
        wait_for(lambda: not http_ok(f"http://127.0.0.1:{port}/health", timeout=0.5), timeout=30,
                 what="the engine to stop with its driver", why=lambda: processes.log_tail(driver))
    finally:
        processes.stop(driver)
