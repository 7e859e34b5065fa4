"""Candidates -> engines -> Jobs: validated against the target's accelerator, pods that never serve the target."""

from __future__ import annotations

import json

import pytest

from specinfer.api import InvalidSpecError, parse_spec
from specinfer.api.calibration import SpeculativeInferenceCalibrationSpec
from specinfer.operator.calibration.pure.render import build_engines_configmap, build_job, job_name, plan
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render import render
from specinfer.runtime.contract.live_schedule import SCHEDULE_FILE_ENV, STATE_FILE_ENV

pytestmark = pytest.mark.unit

TARGET = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
          "speculation": {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                          "numSpeculativeTokens": 3,
                          "schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 3},
                                       {"minBatchSize": 9, "maxBatchSize": 64, "numSpeculativeTokens": 1}]},
          "hardware": {"accelerator": "nvidia", "count": 2, "product": "NVIDIA-H100-80GB-HBM3"},
          "tuning": {"mode": "auto"}}
META = {"name": "cal", "namespace": "team-a", "uid": "u-1"}


def spec(**values) -> SpeculativeInferenceCalibrationSpec:
    return SpeculativeInferenceCalibrationSpec.model_validate({"targetRef": {"name": "llama"}, **values})


def test_engines_are_the_configured_method_the_candidates_and_none():
    the_plan = plan(spec(candidates=[{"speculation": {"method": "ngram"}, "numSpeculativeTokens": [2, 5]}]),
                    parse_spec(TARGET))
    assert [(e.candidate, e.method, e.k) for e in the_plan.engines] == [
        ("configured", "eagle3", 1), ("configured", "eagle3", 2), ("configured", "eagle3", 3),
        ("configured", "eagle3", 4), ("ngram", "ngram", 2), ("ngram", "ngram", 5), ("none", "none", 0)]
    configured = the_plan.engines[2].spec
    assert configured.speculation.num_speculative_tokens == 3 and configured.speculation.schedule is None
    assert configured.speculation.draft_model.name == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert configured.hardware == parse_spec(TARGET).hardware and configured.model == parse_spec(TARGET).model
    assert the_plan.engines[-1].spec.speculation.method == "none"
    assert the_plan.configured_method == "eagle3" and len(the_plan.fingerprint) == 16


def test_a_listed_none_is_the_baseline_and_a_target_without_speculation_has_no_configured():
    the_plan = plan(spec(candidates=[{"speculation": {"method": "none"}}, {"speculation": {"method": "ngram"}}],
                         numSpeculativeTokens=[3]), parse_spec({**TARGET, "speculation": {"method": "none"},
                                                                "tuning": {"mode": "observe"}}))
    assert [e.key for e in the_plan.engines] == ["ngram-k3", "none-k0"]


@pytest.mark.parametrize(("calibration", "accelerator", "field", "words"), [
    ({"candidates": [{"speculation": {"method": "dspark"}}]}, "cpu", "spec.candidates[0].speculation",
     "cpu"),
    ({"candidates": [{"speculation": {"method": "ngram"}, "numSpeculativeTokens": [2, 40]}]}, "nvidia",
     "spec.candidates[0].numSpeculativeTokens", "K 40 outside 1..16"),
    ({"numSpeculativeTokens": [16]}, "ascend", "spec.numSpeculativeTokens",
     "K 16 outside 1..15, the draft lengths method eagle3 runs on ascend"),
])
def test_what_the_catalogue_refuses_is_named_against_the_calibration(calibration, accelerator, field, words):
    target = parse_spec({**TARGET, "hardware": {"accelerator": accelerator}})
    with pytest.raises(InvalidSpecError) as caught:
        plan(spec(**calibration), target)
    assert caught.value.field_path == field
    assert str(caught.value).startswith(field) and words in str(caught.value), str(caught.value)


def test_job_runs_the_targets_pod_but_never_as_the_target():
    target = parse_spec(TARGET)
    calibration = spec(candidates=[{"speculation": {"method": "ngram"}}], batchSizes=[1, 8],
                       prompts={"configMapRef": {"name": "my-prompts", "key": "chat.txt"}},
                       load={"warmupSeconds": 5, "durationSeconds": 20, "temperature": 0.7})
    the_plan = plan(calibration, target)
    engine = next(e for e in the_plan.engines if e.key == "ngram-k2")
    job = build_job(META, calibration, "llama", engine, OperatorConfig())
    served = render({"metadata": {"name": "llama", "namespace": "team-a", "uid": "t"}, "spec": TARGET},
                    OperatorConfig()).manifest("Deployment")["spec"]["template"]["spec"]
    pod = job["spec"]["template"]["spec"]
    container, served_container = pod["containers"][0], served["containers"][0]

    assert job["metadata"]["name"] == job_name("cal", engine) == "cal-ngram-k2"
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert "specinfer.io/name" not in labels  # neither the Service, the PodMonitor nor the Deployment selects it
        assert labels["specinfer.io/calibration"] == "cal" and labels["specinfer.io/candidate"] == "ngram"
        assert labels["app.kubernetes.io/managed-by"] == "specinfer-operator"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "SpeculativeInferenceCalibration"
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] == 1800 + 2 * (5 + 20 + 60) + 300
    assert container["command"] == ["specinfer", "calibrate"]
    args = container["args"]
    assert args[:2] == ["--engine-config", "/etc/specinfer/runtime.json"] and "--termination-message" in args
    assert args[args.index("--batch-sizes") + 1] == "1,8" and args[args.index("--temperature") + 1] == "0.7"
    assert args[args.index("--prompts") + 1] == "/etc/specinfer-prompts/prompts"
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(container)
    # the engine runs as the target's: image, devices, env, security, placement
    for key in ("image", "resources", "securityContext", "terminationMessagePolicy"):
        assert container[key] == served_container[key], key
    # the served engine follows a published schedule (tuning auto: retuned in place); a candidate runs as
    # configured, without one
    live = {SCHEDULE_FILE_ENV, STATE_FILE_ENV}
    assert {e["name"] for e in served_container["env"]} & live == live
    assert container["env"] == [e for e in served_container["env"] if e["name"] not in live]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    for key in ("securityContext", "nodeSelector", "tolerations", "automountServiceAccountToken"):
        assert pod[key] == served[key], key
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["runtime-config"]["configMap"] == {"name": "cal-engines",
                                                      "items": [{"key": "ngram-k2.json", "path": "runtime.json"}]}
    assert volumes["prompts"]["configMap"] == {"name": "my-prompts", "items": [{"key": "chat.txt",
                                                                                 "path": "prompts"}]}
    assert "ngram" in job["spec"]["template"]["metadata"]["annotations"]["specinfer.io/engine-command"]


def test_engines_configmap_holds_each_runtime_config():
    calibration = spec(candidates=[{"speculation": {"method": "ngram"}}], numSpeculativeTokens=[2])
    the_plan = plan(calibration, parse_spec(TARGET))
    configmap = build_engines_configmap(META, "llama", the_plan, OperatorConfig())
    assert sorted(configmap["data"]) == ["configured-k2.json", "ngram-k2.json", "none-k0.json"]
    eagle = json.loads(configmap["data"]["configured-k2.json"])
    assert eagle["kind"] == "RuntimeConfig" and eagle["name"] == "llama"
    assert eagle["spec"]["speculation"]["numSpeculativeTokens"] == 2 and "schedule" not in eagle["spec"]["speculation"]
    assert json.loads(configmap["data"]["none-k0.json"])["spec"]["speculation"]["method"] == "none"


def test_long_names_stay_within_a_label():
    the_plan = plan(spec(numSpeculativeTokens=[2]), parse_spec(TARGET))
    name = job_name("c" * 60, the_plan.engines[0])
    assert len(name) <= 63 and name != job_name("c" * 61, the_plan.engines[0])
