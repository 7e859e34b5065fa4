"""Fixtures for tests on the real vLLM CPU engine (marker `engine`): the cached engine environment and tiny models.

These tests need `make setup` (which installs the engine environment); without it they fail
with the command to run, never skip: `make test` installs it first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
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
    (the drafters are built once per machine into the cache -- the engine runs twice, 1-3 minutes -- then copied),
    kept where the same bytes were kept before (`kept_by_content`)."""
    made = tmp_path_factory.mktemp("models") / "tiny"
    subprocess.run([SPECINFER, "models", "make", str(made)], check=True, timeout=900)
    return kept_by_content(made)


def kept_by_content(made: Path) -> Path:
    """`made`'s files at a path of the cache named by their bytes, shared by every session that makes the same.

    vLLM keys its torch.compile cache by the model's path among the rest of the config: at a new temporary path
    each session, every engine compiled from scratch (~15-20 s of CPU for the target and its drafter); at
    a path that changes only with the bytes, a session finds what the last one compiled."""
    from specinfer.dev.vllm_wheels import cache_dir

    digest = hashlib.sha256()
    for file in sorted(path for path in made.rglob("*") if path.is_file()):
        digest.update(str(file.relative_to(made)).encode() + b"\0" + file.read_bytes())
    kept = cache_dir() / "models" / f"tiny-tests-{digest.hexdigest()[:16]}"
    if not kept.is_dir():
        partial = kept.with_name(f"{kept.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(made, partial)
        try:
            partial.rename(kept)
        except OSError:  # another session kept the same bytes first
            shutil.rmtree(partial, ignore_errors=True)
    return kept
