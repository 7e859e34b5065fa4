"""Rendering behaviour that every golden file relies on, asserted on the returned objects."""

from __future__ import annotations

import copy
import json

import pytest

from specinfer.api import InvalidSpecError
from specinfer.operator.pure.config import OperatorConfig, parse_config
from specinfer.operator.render import render
from specinfer.operator.render_cli import dump_manifests

pytestmark = pytest.mark.unit

BASE = {
    "apiVersion": "specinfer.io/v1alpha1",
    "kind": "SpeculativeInference",
    "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1", "generation": 3},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
                        "numSpeculativeTokens": 3},
        "hardware": {"accelerator": "nvidia", "count": 2},
    },
}


def resource(**spec_patch) -> dict:
    out = copy.deepcopy(BASE)
    out["spec"].update(spec_patch)
    return out


def deployment(rendering) -> dict:
    return rendering.manifest("Deployment")


def pod_spec(rendering) -> dict:
    return deployment(rendering)["spec"]["template"]["spec"]


def test_children_in_apply_order_with_owner_and_labels():
    rendering = render(resource(), OperatorConfig())
    assert [m["kind"] for m in rendering.manifests] == ["ConfigMap", "Deployment", "Service"]
    for manifest in rendering.manifests:
        assert manifest["metadata"]["namespace"] == "ml"
        assert manifest["metadata"]["ownerReferences"][0]["uid"] == "u-1"
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specinfer-operator"
    labels = deployment(rendering)["spec"]["template"]["metadata"]["labels"]
    assert (labels["specinfer.io/name"], labels["specinfer.io/method"], labels["specinfer.io/k"]) == (
        "llama", "eagle3", "3")


def test_pod_runs_the_runtime_on_the_mounted_config():
    rendering = render(resource(), OperatorConfig())
    spec = pod_spec(rendering)
    container = spec["containers"][0]
    assert container["command"] == ["specinfer", "runtime"]
    assert {"name": "runtime-config", "mountPath": "/etc/specinfer", "readOnly": True} in container["volumeMounts"]
    assert spec["automountServiceAccountToken"] is False
    config = json.loads(rendering.manifest("ConfigMap")["data"]["runtime.json"])
    assert config["kind"] == "RuntimeConfig" and config["name"] == "llama" and config["namespace"] == "ml"
    assert config["spec"]["speculation"]["numSpeculativeTokens"] == 3
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    command = deployment(rendering)["spec"]["template"]["metadata"]["annotations"]["specinfer.io/engine-command"]
    for flag in ("--speculative-config", "--tensor-parallel-size 2", "--port 8000", "--served-model-name"):
        assert flag in command
    assert deployment(rendering)["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}


@pytest.mark.parametrize(("accelerator", "device"), [("nvidia", "nvidia.com/gpu"), ("amd", "amd.com/gpu"),
                                                     ("ascend", "huawei.com/Ascend910"), ("cpu", None)])
def test_device_resource_per_accelerator(accelerator, device):
    rendering = render(resource(hardware={"accelerator": accelerator}), OperatorConfig())
    limits = pod_spec(rendering)["containers"][0].get("resources", {}).get("limits", {})
    assert limits == ({device: "1"} if device else {})


def test_config_hash_changes_with_k_but_not_with_replicas_or_tuning():
    base = render(resource(), OperatorConfig()).config_hash
    assert render(resource(replicas=4), OperatorConfig()).config_hash == base
    assert render(resource(tuning={"mode": "off"}), OperatorConfig()).config_hash == base
    changed = resource()
    changed["spec"]["speculation"]["numSpeculativeTokens"] = 5
    assert render(changed, OperatorConfig()).config_hash != base


def test_update_strategy_sets_the_rolling_update_and_never_restarts_pods():
    surge = render(resource(), OperatorConfig())
    assert deployment(surge)["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    replace = render(resource(updateStrategy="Replace"), OperatorConfig())
    assert deployment(replace)["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    # the engine never reads it: switching strategy re-renders the Deployment, not the pods
    assert replace.config_hash == surge.config_hash
    assert "updateStrategy" not in json.dumps(replace.manifest("ConfigMap"))
    assert deployment(replace)["spec"]["template"] == deployment(surge)["spec"]["template"]


def test_applied_tuning_from_status_is_rendered():
    tuned = resource()
    tuned["status"] = {"tuning": {"applied": {"numSpeculativeTokens": 6}}}
    rendering = render(tuned, OperatorConfig())
    assert rendering.effective_status().num_speculative_tokens == 6
    assert deployment(rendering)["spec"]["template"]["metadata"]["labels"]["specinfer.io/k"] == "6"
    off = resource()
    off["status"] = {"tuning": {"applied": {"numSpeculativeTokens": 0}}}
    assert render(off, OperatorConfig()).effective_status().method == "none"


def test_speculation_switched_off_by_the_tuner_renders_in_auto_mode():
    """The tuner's `disable` (an acceptance collapse) under tuning mode auto: the pods run without
    --speculative-config; the rule that auto needs a speculative method is about the user's spec."""
    off = resource(tuning={"mode": "auto"})
    off["status"] = {"tuning": {"applied": {"numSpeculativeTokens": 0, "method": "eagle3"}}}
    rendering = render(off, OperatorConfig())
    assert rendering.effective_status().method == "none"
    command = deployment(rendering)["spec"]["template"]["metadata"]["annotations"]["specinfer.io/engine-command"]
    assert "--speculative-config" not in command
    assert deployment(rendering)["spec"]["template"]["metadata"]["labels"]["specinfer.io/k"] == "0"


def test_applied_tuning_that_no_longer_fits_is_reported():
    tuned = resource()
    tuned["status"] = {"tuning": {"applied": {"numSpeculativeTokens": 60}}}
    with pytest.raises(InvalidSpecError) as error:
        render(tuned, OperatorConfig())
    assert error.value.field_path == "status.tuning.applied"


def test_invalid_spec_and_name_raise_invalid_spec():
    bad = resource()
    bad["spec"]["speculation"].pop("draftModel")
    with pytest.raises(InvalidSpecError, match="draftModel"):
        render(bad, OperatorConfig())
    long_name = resource()
    long_name["metadata"]["name"] = "x" * 64
    with pytest.raises(InvalidSpecError, match="metadata.name"):
        render(long_name, OperatorConfig())


def test_user_env_wins_and_hub_token_comes_from_a_secret():
    spec = resource(runtime={"env": [{"name": "HF_HOME", "value": "/data"}]})
    spec["spec"]["model"]["hubTokenSecretRef"] = {"name": "hf", "key": "token"}
    env = {e["name"]: e for e in pod_spec(render(spec, OperatorConfig()))["containers"][0]["env"]}
    assert env["HF_HOME"]["value"] == "/data"
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}


def test_operator_config_overrides_the_profile():
    config = parse_config({"images": {"nvidia": "registry.example/rt:1"},
                           "profiles": {"nvidia": {"nodeSelector": {"pool": "gpu"}, "shmSize": "64Gi"}},
                           "modelCache": {"persistentVolumeClaim": "weights"}})
    spec = resource()
    spec["spec"]["hardware"]["product"] = "NVIDIA-H100-80GB-HBM3"
    pod = pod_spec(render(spec, config))
    assert pod["containers"][0]["image"] == "registry.example/rt:1"
    assert pod["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["sizeLimit"] == "64Gi"
    assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": "weights"}


def test_podmonitor_only_when_asked():
    assert render(resource(), OperatorConfig(), podmonitor=True).manifest("PodMonitor") is not None
    assert render(resource(), OperatorConfig()).manifest("PodMonitor") is None


def test_offline_render_has_no_owner_and_dumps_plain_yaml():
    offline = resource()
    del offline["metadata"]["uid"]
    text = dump_manifests(render(offline, OperatorConfig()).manifests)
    assert "ownerReferences" not in text and "&id" not in text and "runtime.json: |" in text


def test_render_command_prints_manifests_and_refuses_invalid_specs(tmp_path):
    import yaml
    from click.testing import CliRunner

    from specinfer.operator.render_cli import render_command

    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(resource()))
    result = CliRunner().invoke(render_command, ["-f", str(good), "--accelerator", "amd"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service"]
    limits = docs[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"amd.com/gpu": "2"}
    bad_resource = resource()
    bad_resource["spec"]["speculation"]["numSpeculativeTokens"] = 99
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(bad_resource))
    result = CliRunner().invoke(render_command, ["-f", str(bad)])
    assert result.exit_code == 2
    assert "spec.speculation.numSpeculativeTokens" in result.output


def test_status_effective_says_which_model_runner_and_graphs_the_engine_uses():
    """What the engine really runs, from the catalogue's engine facts: a schedule on Model Runner V1
    with full CUDA graphs downgrades them to PIECEWISE; V2 keeps them; the CPU engine has none."""
    schedule = [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 3},
                {"minBatchSize": 9, "maxBatchSize": 64, "numSpeculativeTokens": 0}]

    def effective(accelerator: str, **speculation):
        body = resource()
        body["spec"]["hardware"] = {"accelerator": accelerator}
        body["spec"]["speculation"].update(numSpeculativeTokens=3, **speculation)
        return render(body, OperatorConfig()).effective_status()

    on_v1 = effective("nvidia", schedule=schedule, advanced={"parallel_drafting": True})
    assert (on_v1.model_runner, on_v1.piecewise_cuda_graphs) == ("v1", True)
    on_v2 = effective("nvidia", schedule=schedule)
    assert (on_v2.model_runner, on_v2.piecewise_cuda_graphs) == ("v2", False)
    on_cpu = effective("cpu", schedule=schedule)
    assert (on_cpu.model_runner, on_cpu.piecewise_cuda_graphs) == ("v1", False)
    assert effective("nvidia").piecewise_cuda_graphs is None  # no schedule, nothing to downgrade
