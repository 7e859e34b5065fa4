"""`vllm serve` argv per method x accelerator, compared with golden files.

Regenerate after an intended change with:
    SPECINFER_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_runtime_argv.py
and review the diff of tests/unit/golden/runtime_argv/.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from specinfer.api import parse_spec
from specinfer.runtime.contract.argv import engine_env, vllm_argv
from specinfer.runtime.methods import all_methods

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "runtime_argv"
UPDATE = os.environ.get("SPECINFER_UPDATE_GOLDEN") == "1"

TARGETS = {"mtp": "deepseek-ai/DeepSeek-V3", "dflash": "Qwen/Qwen3-8B", "dspark": "Qwen/Qwen3-8B"}
DRAFTS = {
    "eagle": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "draftModel": "meta-llama/Llama-3.2-1B-Instruct",
    "dflash": "z-lab/Qwen3-8B-DFlash-b16",
    "dspark": "deepseek-ai/dspark_qwen3_8b_block7",
}

CASES = [(method.name, accelerator) for method in all_methods() for accelerator in sorted(method.accelerators)]


def spec_for(method: str, accelerator: str, **extra):
    speculation: dict = {"method": method}
    if method in DRAFTS:
        speculation["draftModel"] = {"name": DRAFTS[method]}
    spec = {
        "model": {"name": TARGETS.get(method, "meta-llama/Llama-3.1-8B-Instruct")},
        "speculation": speculation,
        "hardware": {"accelerator": accelerator, "count": 1 if accelerator == "cpu" else 2},
    }
    for key, value in extra.items():
        spec[key] = {**spec.get(key, {}), **value}
    return parse_spec(spec)


def render(spec) -> str:
    pins = dict(engine_env(spec, {}))
    lines = [shlex.join(vllm_argv(spec))]
    lines += [f"env {name}={value}" for name, value in sorted(pins.items())]
    return "\n".join(lines) + "\n"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"no golden file {path}: run with SPECINFER_UPDATE_GOLDEN=1 and review it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"argv changed for {name}; if intended, regenerate (see module docstring)"


@pytest.mark.parametrize(("method", "accelerator"), CASES)
def test_argv_matches_golden(method, accelerator):
    check_golden(f"{method}-{accelerator}", render(spec_for(method, accelerator)))


def test_every_golden_file_belongs_to_a_case():
    names = {f"{m}-{a}.txt" for m, a in CASES} | {"eagle3-nvidia-everything.txt"}
    assert {p.name for p in GOLDEN.glob("*.txt")} <= names


def test_everything_set_renders_in_order():
    spec = spec_for(
        "eagle3", "nvidia",
        model={"revision": "main", "servedModelName": "llama"},
        speculation={"numSpeculativeTokens": 5,
                     "schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 5},
                                  {"minBatchSize": 9, "maxBatchSize": 64, "numSpeculativeTokens": 2},
                                  {"minBatchSize": 65, "maxBatchSize": 256, "numSpeculativeTokens": 0}]},
        hardware={"count": 4, "tensorParallelSize": 2},
        runtime={"port": 9000, "extraArgs": ["--max-num-seqs", "128", "--gpu-memory-utilization=0.9"]},
    )
    argv = vllm_argv(spec)
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert argv[argv.index("--port") + 1] == "9000"
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--served-model-name") + 1] == "llama"
    assert argv[argv.index("--revision") + 1] == "main"
    assert argv[-3:] == ["--max-num-seqs", "128", "--gpu-memory-utilization=0.9"]
    config = argv[argv.index("--speculative-config") + 1]
    assert '"num_speculative_tokens_per_batch_size":[[1,8,5],[9,64,2],[65,256,0]]' in config
    check_golden("eagle3-nvidia-everything", render(spec))


def test_method_none_has_no_speculative_config():
    assert "--speculative-config" not in vllm_argv(spec_for("none", "nvidia"))


def test_pins_do_not_override_what_the_pod_sets():
    spec = spec_for("eagle3", "amd")
    pins = engine_env(spec, {})
    for name in pins:
        assert engine_env(spec, {name: "mine"})[name] == "mine"
