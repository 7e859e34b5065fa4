"""`python -m specinfer.dev.cpu_engine.acceptance METHOD DRAFTER TARGET`: what one drafter earns on the engine.

Runs vLLM (engine environment) with `{"method": METHOD, "model": DRAFTER, "num_speculative_tokens": 3}`
(DRAFTER `-`: none, as MTP takes its layer from the target) on prompts of the demo's kind that the
drafter tables never saw (another seed), greedy, and prints vLLM's own spec-decode counters: drafts,
accepted tokens per draft position and the first position's acceptance. `specinfer models measure
DIR` runs it for every drafter `specinfer models make DIR` wrote.
"""

from __future__ import annotations

import json
import random
import sys

K = 3
HELD_OUT_SEED = 99  # not drafters.DRAFTER_SEED: prompts the tables were not built from


def held_out_prompts() -> list[str]:
    rng = random.Random(HELD_OUT_SEED)
    words = ("alpha", "beta", "gamma", "delta", "omega")
    return [" ".join(rng.choice(words) for _ in range(rng.choice((16, 64, 128)))) for _ in range(8)]


def measure(method: str, drafter: str | None, target: str) -> dict:
    from vllm import LLM, SamplingParams

    speculative = {"method": method, "num_speculative_tokens": K, **({"model": drafter} if drafter else {})}
    llm = LLM(model=target, speculative_config=speculative, max_num_seqs=8, max_model_len=2048, enforce_eager=True,
              seed=0, disable_log_stats=False)
    llm.generate(held_out_prompts(), SamplingParams(temperature=0, max_tokens=64, ignore_eos=True), use_tqdm=False)
    metrics = {metric.name: metric for metric in llm.get_metrics()}
    drafts = metrics["vllm:spec_decode_num_drafts"].value
    accepted = list(metrics["vllm:spec_decode_num_accepted_tokens_per_pos"].values)
    return {"method": method, "drafter": drafter, "target": target, "drafts": drafts, "acceptedPerPosition": accepted,
            "firstPositionAcceptance": round(accepted[0] / drafts, 3) if drafts else None}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        sys.exit("usage: python -m specinfer.dev.cpu_engine.acceptance METHOD DRAFTER|- TARGET")
    method, drafter, target = args
    print(json.dumps(measure(method, None if drafter == "-" else drafter, target)))


if __name__ == "__main__":
    main()
