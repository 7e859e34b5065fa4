"""Fixtures for tests on the real vLLM CPU engine (marker `engine`): the cached engine environment and tiny models.

These tests need `make setup` (which installs the engine environment); without it they fail
with the command to run, never skip: `make test` installs it first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specinfer.dev.cpu_engine.environment import EngineNotInstalled

SPECINFER = str(Path(sys.executable).parent / "specinfer")


@pytest.fixture(scope="session")
def engine_env() -> dict[str, str]:
    """This process's environment as a pod in the CPU runtime image sees it (engine env + this checkout)."""
    from specinfer.dev.cpu_engine.overlay import engine_process_env

    try:
        env = engine_process_env()
    except EngineNotInstalled as error:
        pytest.fail(str(error))
    # A small, fixed KV cache: the machine (and so its memory) is shared.
    return {**env, "VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, engine_env) -> Path:
    """DIR with target/, draft-same/, draft-other/ and the seed-method drafters written by `specinfer models make`
    (the drafters are built once per machine into the cache -- the engine runs twice, 1-3 minutes -- then copied)."""
    root = tmp_path_factory.mktemp("models") / "tiny"
    subprocess.run([SPECINFER, "models", "make", str(root)], check=True, timeout=900)
    return root
