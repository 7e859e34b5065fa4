"""`specinfer models make`: deterministic files.

That the real vLLM CPU engine loads them with the acceptance they promise is shown where engines
already run, from vLLM's own counters: the same-weights draft is accepted at every position
(the tuning story's schedules and method `auto`'s comparison: test_tuning_engine.py, test_calibration_engine.py);
the random drafters collapse (dflash-random in test_tuning_engine.py;
the other-weights draft did there in every run until 2026-12-04).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from specinfer.dev.cpu_engine.drafters import DRAFTERS
from specinfer.dev.cpu_engine.models import DRAFT_OTHER, DRAFT_SAME, TARGET
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
    # The fixture's run also copied the drafters in; --no-drafters writes exactly the three models.
    assert {name.split("/")[0] for name in second} == {TARGET, DRAFT_SAME, DRAFT_OTHER}
    assert {name for name in first if name.split("/")[0] in (TARGET, DRAFT_SAME, DRAFT_OTHER)} == set(second)
    assert {name: first[name] for name in second} == second
    assert {f"{name}/model.safetensors" for name in DRAFTERS} <= set(first)
    assert first["draft-same/model.safetensors"] == first["target/model.safetensors"]
    assert first["draft-other/model.safetensors"] != first["target/model.safetensors"]
    config = json.loads((tiny_models / "target" / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # vLLM's CPU attention needs it


# Two builds of every drafter from the same greedy paths, in the engine environment (torch lives there).
# Fixed paths stand in for the engine's: what is under test is that the construction itself draws the
# same bytes, which the per-machine cache would otherwise hide (a second `make` only copies).
TWO_BUILDS = """
import json, sys
from pathlib import Path
from specinfer.dev.cpu_engine.drafters import make_drafters
from specinfer.dev.cpu_engine.models import train_tokenizer
target, out = Path(sys.argv[1]), Path(sys.argv[2])
paths = [[(7 * start + 3 * step) % 300 + 3 for step in range(40)] for start in range(30)]
for run in ("one", "two"):
    make_drafters(out / run, target, train_tokenizer(), lambda folder: paths, log=lambda line: None)
"""


def test_drafters_are_built_to_the_same_bytes(tiny_models, engine_env, tmp_path):
    python = str(Path(engine_env["VIRTUAL_ENV"]) / "bin" / "python")
    env = {**engine_env, "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0"}
    subprocess.run([python, "-c", TWO_BUILDS, str(tiny_models / TARGET), str(tmp_path)], check=True, env=env,
                   cwd=tmp_path, timeout=300)
    one, two = file_hashes(tmp_path / "one"), file_hashes(tmp_path / "two")
    assert {f"{name}/model.safetensors" for name in DRAFTERS} <= set(one)
    assert one == two
