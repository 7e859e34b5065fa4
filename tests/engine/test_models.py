"""`specinfer models make`: deterministic files.

That the real vLLM CPU engine loads them with the acceptance they promise is shown where engines
already run, from vLLM's own counters: the same-weights draft is accepted at every position
(tests/engine/test_pod_engine.py), the other-weights draft collapses (test_tuning_engine.py).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.engine.conftest import SPECINFER

pytestmark = pytest.mark.engine


def file_hashes(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def test_two_runs_write_identical_files(tiny_models, tmp_path):
    again = tmp_path / "again"
    subprocess.run([SPECINFER, "models", "make", str(again), "--no-drafters"], check=True, timeout=300)
    first, second = file_hashes(tiny_models), file_hashes(again)
    assert {"target/model.safetensors", "target/tokenizer.json", "target/config.json",
            "draft-same/model.safetensors", "draft-other/model.safetensors"} <= set(first)
    assert first == second
    assert first["draft-same/model.safetensors"] == first["target/model.safetensors"]
    assert first["draft-other/model.safetensors"] != first["target/model.safetensors"]
    config = json.loads((tiny_models / "target" / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # vLLM's CPU attention needs it
