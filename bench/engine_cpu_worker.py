"""Run by the ENGINE environment's interpreter: offline vLLM runs over batch sizes for one (method, K).

usage: python -m specinfer.bench.engine_cpu_worker TARGET METHOD K TOKENS BATCHES [DRAFT] [--eager]
One LLM per call (K is fixed per engine), one greedy generate per batch size; prints one
`ROW {json}` line per batch size with wall time, engine steps (vllm:iteration_tokens_total's
count) and the spec-decode counters, all deltas over that generate.
"""

from __future__ import annotations

import json
import sys
import time

PROMPT = "one two three four five six seven eight one two three four five six seven eight one two three"


def snapshot(llm) -> dict:
    from vllm.v1.metrics.reader import Counter, Histogram, Vector

    values: dict = {}
    for metric in llm.get_metrics():
        if isinstance(metric, Counter):
            values[metric.name] = values.get(metric.name, 0) + metric.value
        elif isinstance(metric, Vector):
            values[metric.name] = list(metric.values)
        elif isinstance(metric, Histogram):
            values[metric.name + ":count"] = values.get(metric.name + ":count", 0) + metric.count
    return values


def delta(after: dict, before: dict, name: str):
    now, then = after.get(name), before.get(name)
    if isinstance(now, list):
        return [a - b for a, b in zip(now, then or [0] * len(now), strict=False)]
    return (now or 0) - (then or 0)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--eager"]
    eager = "--eager" in sys.argv
    target, method, k, tokens, batches = args[0], args[1], int(args[2]), int(args[3]), args[4]
    draft = args[5] if len(args) > 5 else None
    from vllm import LLM, SamplingParams

    speculative = None
    if k > 0 and method == "draft_model":
        speculative = {"method": "draft_model", "model": draft, "num_speculative_tokens": k}
    elif k > 0 and method == "ngram":
        speculative = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    started = time.monotonic()
    llm = LLM(model=target, max_model_len=1024, seed=0, disable_log_stats=False, enforce_eager=eager,
              max_num_seqs=max(int(b) for b in batches.split(",")), speculative_config=speculative)
    startup = time.monotonic() - started
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))  # warm-up
    for batch in (int(b) for b in batches.split(",")):
        before = snapshot(llm)
        started = time.monotonic()
        outputs = llm.generate([PROMPT] * batch, params, use_tqdm=False)
        wall = time.monotonic() - started
        after = snapshot(llm)
        row = {"method": method if k else "none", "k": k, "batch": batch, "wall_s": wall, "startup_s": startup,
               "generated": sum(len(o.outputs[0].token_ids) for o in outputs),
               "steps": delta(after, before, "vllm:iteration_tokens_total:count"),
               "drafts": delta(after, before, "vllm:spec_decode_num_drafts"),
               "draft_tokens": delta(after, before, "vllm:spec_decode_num_draft_tokens"),
               "accepted_per_pos": delta(after, before, "vllm:spec_decode_num_accepted_tokens_per_pos")}
        print("ROW " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
