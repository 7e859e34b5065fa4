"""`python -m specinfer.dev.cpu_engine.acceptance METHOD DRAFTER TARGET`: what one drafter earns on the engine.

Runs vLLM (engine environment) with `{"method": METHOD, "model": DRAFTER, "num_speculative_tokens": 3}`
(DRAFTER `-`: none, as MTP takes its layer from the target) on the real-engine demo's prompts -- its
load generator's five words, DEMO_PROMPT_WORDS of them, DEMO_OUTPUT_TOKENS greedy tokens each -- from
a seed the drafter tables never saw, and prints vLLM's own spec-decode counters: drafts, accepted
tokens per draft position and the first position's acceptance. `specinfer models measure DIR` runs
it for every drafter `specinfer models make DIR` wrote.
"""

from __future__ import annotations

import json
import random
import sys

from specinfer.runtime.pod.calibration.requests import synthetic_prompt

K = 3
# marks the result's line: vLLM logs to stdout too, and its shutdown lines come after it
RESULT = "specinfer acceptance: "
HELD_OUT_SEED = 99  # not drafters.DRAFTER_SEED: prompts the tables were not built from
PROMPTS = 16
# What `specinfer demo --engine vllm` sends (demo/run.py reads these): the load generator's synthetic
# prompts (runtime/pod/calibration/requests.py) of 16 words, 128 tokens back
DEMO_PROMPT_WORDS = 16
DEMO_OUTPUT_TOKENS = 128


def held_out_prompts() -> list[str]:
    rng = random.Random(HELD_OUT_SEED)
    return [synthetic_prompt(rng, DEMO_PROMPT_WORDS) for _ in range(PROMPTS)]


def measure(method: str, drafter: str | None, target: str) -> dict:
    from vllm import LLM, SamplingParams

    speculative = {"method": method, "num_speculative_tokens": K, **({"model": drafter} if drafter else {})}
    llm = LLM(model=target, speculative_config=speculative, max_num_seqs=8, max_model_len=2048, enforce_eager=True,
              seed=0, disable_log_stats=False)
    sampling = SamplingParams(temperature=0, max_tokens=DEMO_OUTPUT_TOKENS, ignore_eos=True)
    llm.generate(held_out_prompts(), sampling, use_tqdm=False)
    metrics = {metric.name: metric for metric in llm.get_metrics()}
    drafts = metrics["vllm:spec_decode_num_drafts"].value
    accepted = list(metrics["vllm:spec_decode_num_accepted_tokens_per_pos"].values)
    return {"method": method, "drafter": drafter, "target": target, "drafts": drafts, "acceptedPerPosition": accepted,
            "firstPositionAcceptance": round(accepted[0] / drafts, 3) if drafts else None}


def result_of(stdout: str) -> dict | None:
    """The result `main` printed, wherever vLLM's own log lines put it; None when there is none."""
    for line in reversed(stdout.splitlines()):
        _, marker, result = line.partition(RESULT)
        if marker:
            try:
                return json.loads(result)
            except json.JSONDecodeError:  # another process's output ran into the line
                return None
    return None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        sys.exit("usage: python -m specinfer.dev.cpu_engine.acceptance METHOD DRAFTER|- TARGET")
    method, drafter, target = args
    print(RESULT + json.dumps(measure(method, None if drafter == "-" else drafter, target)), flush=True)


if __name__ == "__main__":
    main()
