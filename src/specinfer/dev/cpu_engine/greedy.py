"""`python -m specinfer.dev.cpu_engine.greedy TARGET OUT`: the engine's own greedy paths of a target.

Runs vLLM (in the engine environment) on the drafter tables' prompts and writes, per prompt, the
last prompt token and the 128 generated ones as JSON: what the tiny drafters (drafters.py) learn
from. The engine, not a transformers forward: the two disagree on 30% of a random model's greedy
tokens, and a drafter must predict what the engine generates.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

IN_PROCESS_CORE = "VLLM_ENABLE_V1_MULTIPROCESSING"  # "0": vLLM's engine core runs in the calling process


def engine_paths(target: Path) -> list[list[int]]:
    from vllm import LLM, SamplingParams

    from specinfer.dev.cpu_engine.drafters import NEW_TOKENS, table_prompts

    # the worker stays in a process of its own, as in a served engine (vLLM sets its OpenMP threads there)
    llm = LLM(model=str(target), max_num_seqs=16, max_model_len=2048, enforce_eager=True, seed=0,
              distributed_executor_backend="mp")
    outputs = llm.generate(table_prompts(), SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True),
                           use_tqdm=False)
    return [[output.prompt_token_ids[-1], *output.outputs[0].token_ids] for output in outputs]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.exit("usage: python -m specinfer.dev.cpu_engine.greedy TARGET OUT")
    # The engine core in this process (its worker still in its own): `generate` queues every prompt
    # before the first step. With the core in a process of its own it starts stepping while they
    # still arrive, so which prompts share a batch can vary from run to run, and with it the kernels'
    # sums: on 2026-12-04 two such runs on one machine disagreed on one of the 309 paths (a near-tie
    # decided the other way), and the EAGLE-3 head's bytes with it; three runs this way agreed on
    # every token. (With the worker in this process too, vLLM sets no OpenMP threads for it on CPU,
    # and its paths differed from a multiprocess engine's in 3 or 4 of the 309.)
    os.environ[IN_PROCESS_CORE] = "0"
    Path(args[1]).write_text(json.dumps(engine_paths(Path(args[0]))))


if __name__ == "__main__":
    main()
