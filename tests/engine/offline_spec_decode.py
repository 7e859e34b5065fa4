"""Run by the ENGINE environment's interpreter (not pytest's): offline vLLM runs, their spec-decode counters as JSON.

usage: python offline_spec_decode.py TARGET K DRAFT [DRAFT ...]
For each draft, greedy decoding of a few fixed prompts with `draft_model` speculation; prints
one `RESULT {json}` line per draft with vLLM's own counters (LLM.get_metrics), so the caller
judges acceptance from the engine, not from config. One process for all drafts: importing
vLLM and torch costs more than an engine start (enforce_eager) for these tiny models.
"""

import gc
import json
import sys


def run(target: str, draft: str, k: int) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.v1.metrics.reader import Counter, Vector

    llm = LLM(model=target, max_model_len=512, enforce_eager=True, seed=0, disable_log_stats=False,
              speculative_config={"method": "draft_model", "model": draft, "num_speculative_tokens": k})
    prompts = ["the quick brown fox", "count one two three", "speculative decoding drafts", "to be or not"]
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True))
    counters = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            if isinstance(metric, Counter):
                counters[metric.name] = metric.value
            elif isinstance(metric, Vector):
                counters[metric.name] = metric.values
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    return {"draft": draft, "generated_tokens": generated, "counters": counters}


def main() -> None:
    target, k, drafts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    for draft in drafts:
        print("RESULT " + json.dumps(run(target, draft, k)), flush=True)


if __name__ == "__main__":
    main()
