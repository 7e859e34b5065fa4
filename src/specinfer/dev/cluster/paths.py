"""Where the local control plane keeps binaries (cache) and running state."""

from __future__ import annotations

import os
from pathlib import Path

from specinfer.dev.vllm_wheels import cache_dir

REPO_ROOT = Path(__file__).resolve().parents[4]
TOOLS_DIR = REPO_ROOT / "tools"


def bin_cache_dir() -> Path:
    """Built binaries, keyed by component version and wrapper-module checksum."""
    return cache_dir() / "bin"


def state_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    # absolute: the kubeconfig names its certificates by path, and kubectl resolves a relative one
    # against the kubeconfig's own folder
    return Path(base).absolute() / "specinfer" / "clusters"


def cluster_dir(name: str) -> Path:
    return state_root() / name
