"""`make gpu-check`: a few minutes on a GPU to check what retuning in place rests on, never run here.

Everything specinfer says about vLLM 0.33.0 on GPUs is read from the wheel (docs/engine-truth.md); this
runs the in-place path once on the real engine: a tiny model with n-gram drafting (no draft model to
download), started as the operator starts an in-place engine (its envelope, the V2 startup ladder,
specinfer's scheduler class), then

1. the scheduler vLLM built is specinfer's, under vLLM's AsyncScheduler (async scheduling on V2);
2. with K = 4 published, drafts are 4 long and later positions are accepted;
3. a schedule of K = 1 written to the file is taken between steps (the scheduler's lookup, the state
   file's digest), and the per-position counters follow it: nothing beyond position 0 is accepted, and
   drafts are at most 1 long.

It fails with one line naming the check, and at once, exit 2, where no GPU or no vLLM 0.33.0 is there.
Run it where both are -- inside the runtime image:

    make gpu-check GPU_IMAGE=ghcr.io/specinfer/runtime:0.1.0-vllm0.33.0-cuda
    docker run --rm --gpus all --entrypoint python3 <image> -m specinfer.dev.gpu_check   # the same

The model must be reachable (the Hugging Face Hub, or `--model /path`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specinfer import VLLM_VERSION
from specinfer.runtime.contract.live_schedule import SCHEDULE_FILE_ENV, SCHEDULER_CLASS, STATE_FILE_ENV
from specinfer.runtime.contract.live_schedule.envelope import LiveEnvelope, startup_ranges
from specinfer.runtime.contract.live_schedule.published import published_text, schedule_digest
from specinfer.runtime.pod.live_schedule.watcher import CHECK_INTERVAL_SECONDS, read_state

MAX_K = 4
EVERY_BATCH = 65536
# Repetition gives the n-gram drafter something to copy, so later positions are accepted at K = 4.
PROMPT = "one two three four five six seven eight nine ten " * 24


class CheckFailed(RuntimeError):
    """One check failed: the message names it and what was seen."""


@dataclass(frozen=True)
class Counters:
    """vLLM's speculative-decoding counters at one moment."""

    drafts: float
    draft_tokens: float
    accepted_per_position: tuple[float, ...]

    def since(self, before: Counters) -> Counters:
        width = max(len(self.accepted_per_position), len(before.accepted_per_position))
        now = (*self.accepted_per_position, *(0.0,) * (width - len(self.accepted_per_position)))
        then = (*before.accepted_per_position, *(0.0,) * (width - len(before.accepted_per_position)))
        return Counters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                        tuple(a - b for a, b in zip(now, then, strict=True)))

    @property
    def mean_draft_length(self) -> float:
        return self.draft_tokens / self.drafts if self.drafts else 0.0


def counters_from(metrics: Iterable[Any]) -> Counters:
    """The counters out of vLLM's in-memory metrics (LLM.get_metrics(): objects with name, value(s))."""
    values: dict[str, Any] = {}
    for metric in metrics:
        values[metric.name] = getattr(metric, "values", None) or getattr(metric, "value", 0.0)
    per_position = values.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []
    return Counters(float(values.get("vllm:spec_decode_num_drafts", 0.0)),
                    float(values.get("vllm:spec_decode_num_draft_tokens", 0.0)),
                    tuple(float(v) for v in per_position))


def check_follows(window: Counters, k: int) -> None:
    """The window ran K = `k`: drafts at most k long, nothing accepted at or beyond position k, and at K > 1
    something accepted beyond position 0 (the schedule's K reached verification)."""
    if window.drafts <= 0:
        raise CheckFailed(f"K={k}: no drafts counted (vllm:spec_decode_num_drafts did not grow)")
    if window.mean_draft_length > k + 1e-9:
        raise CheckFailed(f"K={k}: drafts are {window.mean_draft_length:.2f} long on average, above {k}")
    beyond = sum(window.accepted_per_position[k:])
    if beyond > 0:
        raise CheckFailed(f"K={k}: {beyond:.0f} tokens accepted at positions >= {k}")
    if k > 1 and sum(window.accepted_per_position[1:k]) <= 0:
        raise CheckFailed(f"K={k}: nothing accepted beyond position 0: the drafts never reached K={k}")


def gpu_problem() -> str | None:
    """Why this machine cannot run the check (None: it can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed here: run it inside the runtime image (make gpu-check GPU_IMAGE=...)"
    if not torch.cuda.is_available():
        return "no GPU visible (torch.cuda.is_available() is False): run it on a machine with an NVIDIA GPU"
    try:
        import vllm
    except ImportError:
        return "vLLM is not installed here: run it inside the runtime image (make gpu-check GPU_IMAGE=...)"
    if vllm.__version__.split("+")[0] != VLLM_VERSION:
        return f"vLLM {vllm.__version__} is installed, specinfer is pinned to {VLLM_VERSION}: use the runtime image"
    return None


def startup_schedule() -> list[list[int]]:
    """What the operator starts an in-place V2 engine with at this envelope: one batch size per K, then K."""
    ranges = startup_ranges(LiveEnvelope(method="ngram", max_k=MAX_K, model_runner="v2"),
                            ((1, EVERY_BATCH, MAX_K),))
    return [list(entry) for entry in ranges]


def publish(path: Path, k: int) -> str:
    ranges = ((1, EVERY_BATCH, k),)
    path.write_text(published_text(ranges))
    return schedule_digest(ranges)


def _scheduler(llm: Any) -> Any:
    try:
        return llm.llm_engine.engine_core.engine_core.scheduler
    except AttributeError as error:  # an in-process engine core is what VLLM_ENABLE_V1_MULTIPROCESSING=0 gives
        raise CheckFailed(f"cannot reach the engine's scheduler in process ({error})") from None


def _window(llm: Any, sampling: Any, requests: int) -> Counters:
    before = counters_from(llm.get_metrics())
    llm.generate([PROMPT] * requests, sampling, use_tqdm=False)
    return counters_from(llm.get_metrics()).since(before)


def run(model: str, folder: Path, requests: int) -> list[str]:
    """The checks, in order; returns one line per check passed."""
    schedule_file, state_file = folder / "schedule.json", folder / "state.json"
    publish(schedule_file, MAX_K)
    os.environ.update({SCHEDULE_FILE_ENV: str(schedule_file), STATE_FILE_ENV: str(state_file),
                       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    from vllm import LLM, SamplingParams
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    llm = LLM(model=model, max_num_seqs=8, gpu_memory_utilization=0.4, disable_log_stats=False,
              scheduler_cls=SCHEDULER_CLASS,
              speculative_config={"method": "ngram", "num_speculative_tokens": MAX_K, "prompt_lookup_min": 2,
                                  "prompt_lookup_max": 4, "num_speculative_tokens_per_batch_size": startup_schedule()})
    passed = []
    scheduler = _scheduler(llm)
    if not isinstance(scheduler, AsyncScheduler) or type(scheduler).__name__ != "LiveScheduleAsyncScheduler":
        raise CheckFailed(f"the engine runs {type(scheduler).__module__}.{type(scheduler).__name__}, not specinfer's "
                          "scheduler class under vLLM's AsyncScheduler")
    passed.append(f"scheduler: {type(scheduler).__name__} (an AsyncScheduler)")
    sampling = SamplingParams(max_tokens=64, temperature=0.0)
    check_follows(window := _window(llm, sampling, requests), MAX_K)
    passed.append(f"K={MAX_K} published: drafts {window.mean_draft_length:.2f} long, accepted per position "
                  f"{[round(v) for v in window.accepted_per_position]}")
    digest = publish(schedule_file, 1)
    time.sleep(4 * CHECK_INTERVAL_SECONDS)
    llm.generate([PROMPT], SamplingParams(max_tokens=4, temperature=0.0), use_tqdm=False)  # a step reads the file
    lookup = list(getattr(scheduler, "dynamic_sd_lookup", None) or [])
    if not lookup or set(lookup[1:]) != {1}:
        raise CheckFailed(f"the scheduler did not take K=1: its lookup starts {lookup[:10]}")
    state = read_state(state_file) or {}
    if state.get("digest") != digest:
        raise CheckFailed(f"the state file reports digest {state.get('digest')!r}, published {digest!r}")
    passed.append(f"K=1 published: taken between steps (digest {digest})")
    check_follows(window := _window(llm, sampling, requests), 1)
    passed.append(f"K=1 in force: drafts {window.mean_draft_length:.2f} long, accepted per position "
                  f"{[round(v) for v in window.accepted_per_position]}")
    return passed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specinfer.dev.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="facebook/opt-125m", help="a small model vLLM can load")
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args(argv)
    problem = gpu_problem()
    if problem is not None:
        print(f"gpu-check: cannot run here: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="specinfer-gpu-check-") as folder:
        try:
            for line in run(args.model, Path(folder), args.requests):
                print(f"gpu-check: ok: {line}")
        except CheckFailed as failure:
            print(f"gpu-check: FAILED: {failure}", file=sys.stderr)
            return 1
    print("gpu-check: the in-place path works on this GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
