"""`specinfer models make`: deterministic files that the real vLLM CPU engine loads, with the acceptance
they promise."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.engine.conftest import SPECINFER

pytestmark = pytest.mark.engine

PROBE = Path(__file__).with_name("offline_spec_decode.py")


def file_hashes(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def test_two_runs_write_identical_files(tiny_models, tmp_path):
    again = tmp_path / "again"
    subprocess.run([SPECINFER, "models", "make", str(again)], check=True, timeout=300)
    first, second = file_hashes(tiny_models), file_hashes(again)
    assert {"target/model.safetensors", "target/tokenizer.json", "target/config.json",
            "draft-same/model.safetensors", "draft-other/model.safetensors"} <= set(first)
    assert first == second
    assert first["draft-same/model.safetensors"] == first["target/model.safetensors"]
    assert first["draft-other/model.safetensors"] != first["target/model.safetensors"]
    config = json.loads((tiny_models / "target" / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # vLLM's CPU attention needs it


def test_vllm_loads_them_and_the_drafts_are_right_and_wrong(tiny_models, engine_env):
    """vLLM's own counters: the same-weights draft is always accepted, the other-weights draft almost never."""
    k = 3
    result = subprocess.run(
        [str(Path(engine_env["VIRTUAL_ENV"]) / "bin" / "python"), str(PROBE), str(tiny_models / "target"), str(k),
         str(tiny_models / "draft-same"), str(tiny_models / "draft-other")],
        env=engine_env, cwd=tiny_models, capture_output=True, text=True, timeout=480)
    results = [json.loads(line.split(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and len(results) == 2, result.stdout[-3000:] + result.stderr[-3000:]
    same, other = (r["counters"] for r in results)
    print(f"draft-same: {same}\ndraft-other: {other}")
    for counters in (same, other):
        assert counters["vllm:spec_decode_num_draft_tokens"] > 0
        assert len(counters["vllm:spec_decode_num_accepted_tokens_per_pos"]) == k
    assert same["vllm:spec_decode_num_accepted_tokens"] == same["vllm:spec_decode_num_draft_tokens"]
    assert other["vllm:spec_decode_num_accepted_tokens"] <= 0.1 * other["vllm:spec_decode_num_draft_tokens"]
