"""`specinfer runtime`: config loading, preflight, exec and the one-line misconfiguration errors."""

from __future__ import annotations

import dataclasses
import json
import sys
import types

import pytest
from click.testing import CliRunner

from specinfer.api import parse_spec
from specinfer.runtime.methods import get_accelerator
from specinfer.runtime.methods.accelerators import TorchDevices
from specinfer.runtime.methods.accelerators import registry as accelerator_registry
from specinfer.runtime.pod import entrypoint
from specinfer.runtime.pod.config import MisconfigurationError
from specinfer.runtime.pod.preflight import preflight, visible_devices

pytestmark = pytest.mark.unit

SPEC = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {"method": "eagle3", "draftModel": {"name": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}},
    "hardware": {"accelerator": "nvidia", "count": 2},
}


def write_config(tmp_path, spec=None, **overrides):
    body = {"apiVersion": "specinfer.io/v1alpha1", "kind": "RuntimeConfig", "name": "demo", "namespace": "ns",
            "spec": spec or SPEC, **overrides}
    path = tmp_path / "runtime.json"
    path.write_text(json.dumps(body))
    return path


def invoke(*args, env=None):
    return CliRunner().invoke(entrypoint.runtime, list(args), env=env)


def test_dry_run_prints_the_vllm_command(tmp_path):
    result = invoke("--config", str(write_config(tmp_path)), "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 8000")
    assert '"method":"eagle3"' in result.output


def test_config_path_comes_from_the_environment(tmp_path):
    result = invoke("--dry-run", env={"SPECINFER_CONFIG": str(write_config(tmp_path))})
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda s: s["speculation"].pop("draftModel"), "spec.speculation.draftModel"),
    (lambda s: s["speculation"].update(numSpeculativeTokens=999), "spec.speculation.numSpeculativeTokens"),
    (lambda s: s["hardware"].update(accelerator="tpu"), "spec.hardware.accelerator"),
])
def test_misconfiguration_is_one_line_naming_the_field_and_exit_2(tmp_path, mutate, field):
    spec = json.loads(json.dumps(SPEC))
    mutate(spec)
    result = invoke("--config", str(write_config(tmp_path, spec)))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], result.output


def test_missing_or_broken_config_exits_2(tmp_path):
    result = invoke("--config", str(tmp_path / "absent.json"))
    assert result.exit_code == 2 and "not found" in result.output
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    result = invoke("--config", str(broken))
    assert result.exit_code == 2 and "not JSON" in result.output
    result = invoke("--config", str(write_config(tmp_path, kind="Deployment")))
    assert result.exit_code == 2 and "kind must be RuntimeConfig" in result.output


def test_execs_vllm_with_the_catalogue_pins(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(entrypoint.os, "execvpe", lambda file, argv, env: calls.append((file, argv, env)))
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("specinfer.runtime.pod.preflight.visible_devices", lambda accelerator: 2)
    result = invoke("--config", str(write_config(tmp_path)))
    assert result.exit_code == 0, result.output
    [(file, argv, env)] = calls
    assert file == "vllm" and argv[:2] == ["vllm", "serve"]
    assert "PATH" in env  # the pod's environment is passed through


def test_too_few_visible_devices_names_the_count_field(tmp_path, monkeypatch):
    monkeypatch.setattr("specinfer.runtime.pod.preflight.visible_devices", lambda accelerator: 1)
    result = invoke("--config", str(write_config(tmp_path)))
    assert result.exit_code == 2
    assert "spec.hardware.count asks for tensor parallel size 2 but only 1 nvidia device" in result.output


def _fake_torch(monkeypatch, **backends):
    """A torch whose device modules report these counts (torch is not in the test environment)."""
    torch = types.ModuleType("torch")
    for name, count in backends.items():
        setattr(torch, name, types.SimpleNamespace(device_count=lambda count=count: count))
    monkeypatch.setitem(sys.modules, "torch", torch)


def test_preflight_counts_devices_where_each_accelerator_says(monkeypatch):
    """Each accelerator's `device_count` is what preflight reads: ROCm's torch.cuda for amd, torch.npu once
    torch_npu is imported for ascend, nothing on the CPU."""
    _fake_torch(monkeypatch, cuda=3, npu=5)
    assert visible_devices("nvidia") == 3
    assert visible_devices("amd") == 3
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # the plugin that adds torch.npu is absent: not counted
    assert visible_devices("ascend") is None
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    assert visible_devices("ascend") == 5
    assert visible_devices("cpu") is None


def test_preflight_counts_a_new_accelerators_devices_from_its_declaration_alone(monkeypatch):
    """A new accelerator names its torch backend in its module; preflight needs no edit to count it."""
    xpu = dataclasses.replace(get_accelerator("nvidia"), name="xpu", device_count=TorchDevices("xpu"))
    monkeypatch.setitem(accelerator_registry._REGISTRY, "xpu", xpu)
    _fake_torch(monkeypatch, cuda=8, xpu=1)
    assert visible_devices("xpu") == 1
    _fake_torch(monkeypatch, cuda=8)  # a torch without the backend: skipped, as without torch
    assert visible_devices("xpu") is None


def test_preflight_checks_draft_model_and_binary_defensively():
    spec = parse_spec(SPEC)
    without_draft = spec.model_copy(update={"speculation": spec.speculation.model_copy(update={"draft_model": None})})
    with pytest.raises(MisconfigurationError, match="spec.speculation.draftModel is required by method eagle3"):
        preflight(without_draft, count_devices=lambda a: None, which=lambda n: "/bin/vllm")
    with pytest.raises(MisconfigurationError, match="vllm` is not on PATH"):
        preflight(spec, count_devices=lambda a: None, which=lambda n: None)
    preflight(spec, count_devices=lambda a: 8, which=lambda n: "/bin/vllm")  # sound: no error


def test_simulator_engine_runs_the_simulator_from_the_same_config(tmp_path, monkeypatch):
    spec = json.loads(json.dumps(SPEC))
    spec["speculation"]["numSpeculativeTokens"] = 4
    spec["speculation"]["schedule"] = [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                                       {"minBatchSize": 9, "maxBatchSize": 32, "numSpeculativeTokens": 0}]
    spec["runtime"] = {"engine": "simulator", "port": 9001,
                       "simulator": {"timeScale": 20, "costModel": "rtx3090-llama8b", "maxNumSeqs": 64,
                                     "phases": [{"workload": "code", "durationSeconds": 5}]}}
    served = []
    monkeypatch.setattr("specinfer.runtime.sim.server.serve", served.append)
    result = invoke("--config", str(write_config(tmp_path, spec)))
    assert result.exit_code == 0, result.output
    [settings] = served
    assert (settings.method, settings.num_speculative_tokens) == ("eagle3", 4)
    assert settings.schedule == ((1, 8, 4), (9, 32, 0))
    assert (settings.port, settings.time_scale, settings.cost_model, settings.max_batch_size) == (
        9001, 20, "rtx3090-llama8b", 64)
    assert settings.phases[0].workload == "code" and settings.model_name == "meta-llama/Llama-3.1-8B-Instruct"


def test_simulator_dry_run_prints_the_settings_as_json(tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["runtime"] = {"engine": "simulator", "simulator": {"workload": "math"}}
    result = invoke("--config", str(write_config(tmp_path, spec)), "--dry-run")
    assert result.exit_code == 0, result.output
    settings = json.loads(result.output.removeprefix("simulator "))
    assert settings["workload"] == "math" and settings["method"] == "eagle3" and settings["port"] == 8000


def test_a_missing_local_model_directory_fails_preflight_naming_the_field(tmp_path):
    spec = {"model": {"name": str(tmp_path / "no-such-model")}, "speculation": {"method": "ngram"},
            "hardware": {"accelerator": "cpu"}}
    result = invoke("--config", str(write_config(tmp_path, spec)), "--dry-run")
    assert result.exit_code == 2
    assert "spec.model.name" in result.output and "no-such-model does not exist" in result.output


def test_preflight_accepts_existing_local_models_and_checks_the_draft_too(tmp_path):
    (tmp_path / "target").mkdir()
    spec = parse_spec({"model": {"name": str(tmp_path / "target")},
                       "speculation": {"method": "draftModel", "draftModel": {"name": str(tmp_path / "draft")}},
                       "hardware": {"accelerator": "cpu"}})
    with pytest.raises(MisconfigurationError, match="spec.speculation.draftModel.name"):
        preflight(spec, engine_binary=False)
    (tmp_path / "draft").mkdir()
    preflight(spec, engine_binary=False)


def test_misconfiguration_goes_to_the_termination_message_file(tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["speculation"].pop("draftModel")
    log = tmp_path / "termination-log"
    result = invoke("--config", str(write_config(tmp_path, spec)), env={"SPECINFER_TERMINATION_LOG": str(log)})
    assert result.exit_code == 2
    assert log.read_text() == result.output.strip()
    assert "spec.speculation.draftModel" in log.read_text()
