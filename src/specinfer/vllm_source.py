"""Read source files from the pinned vLLM wheel without installing it.

Contract tests ground every vLLM-facing string (method names, config fields,
metric names, plugin interfaces) in the real release. Installing vLLM pulls
CUDA torch (many GB), so we download only the wheel (~340 MB, cached outside
the repository) and read files straight out of the zip.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from specinfer import VLLM_VERSION


def cache_dir() -> Path:
    base = os.environ.get("SPECINFER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specinfer"
    )
    return Path(base)


def wheel_path(version: str = VLLM_VERSION) -> Path:
    """Return the cached vLLM wheel, downloading it with pip on first use."""
    directory = cache_dir() / "vllm" / version
    wheels = sorted(directory.glob(f"vllm-{version}-*.whl"))
    if wheels:
        return wheels[0]
    directory.mkdir(parents=True, exist_ok=True)
    print(f"downloading vllm=={version} wheel (~340 MB, once) into {directory}", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--dest", str(directory), f"vllm=={version}"],
        check=True,
    )
    wheels = sorted(directory.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"pip download left no vllm-{version} wheel in {directory}")
    return wheels[0]


@functools.lru_cache(maxsize=None)
def _zip(version: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path(version))


def read_source(relative_path: str, version: str = VLLM_VERSION) -> str:
    """Text of one file inside the wheel, e.g. read_source("vllm/config/speculative.py")."""
    return _zip(version).read(relative_path).decode("utf-8")

