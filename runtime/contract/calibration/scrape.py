"""An engine's /metrics text -> the counters a calibration point is made of. Pure.

vLLM (and the simulator, which exports vLLM's names) serves Prometheus' text format on its API
port. A point needs, as deltas over its window: engine steps (`vllm:iteration_tokens_total`, a
histogram observed once per step: its `_count`), request-steps (`vllm:inter_token_latency_seconds`,
observed once per running request per step after its first token), generated tokens, drafts and
accepted tokens per position. Series are summed over their other labels (model, engine index),
so a data-parallel engine counts whole. The text comes from the network: parsed with
prometheus_client's parser, size-bounded by the caller, and any value that is not a finite
non-negative number refuses the scrape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from specinfer.runtime.contract.telemetry.vllm_metrics import (
    GENERATION_TOKENS,
    INTER_TOKEN_LATENCY,
    ITERATION_TOKENS,
    SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS,
    SPEC_DECODE_NUM_DRAFTS,
)

MAX_POSITIONS = 64
STEPS = f"{ITERATION_TOKENS.name}_count"
REQUEST_STEPS = f"{INTER_TOKEN_LATENCY.name}_count"
GENERATED = GENERATION_TOKENS.series
DRAFTS = SPEC_DECODE_NUM_DRAFTS.series
ACCEPTED_PER_POS = SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS.series


class ScrapeError(ValueError):
    """The /metrics text cannot give a point (missing series, garbage, a counter that went back)."""


@dataclass(frozen=True)
class Counters:
    steps: float
    request_steps: float
    generated: float
    drafts: float
    accepted: tuple[float, ...]  # by draft position; its length is the engine's K (0 without speculation)

    def minus(self, before: Counters) -> Counters:
        """The increase since `before`; raises ScrapeError if a counter went back (the engine restarted)."""
        if len(self.accepted) != len(before.accepted):
            raise ScrapeError("the engine's draft positions changed between two scrapes: it restarted")
        values = (self.steps - before.steps, self.request_steps - before.request_steps,
                  self.generated - before.generated, self.drafts - before.drafts)
        accepted = tuple(a - b for a, b in zip(self.accepted, before.accepted, strict=True))
        if any(v < 0 for v in (*values, *accepted)):
            raise ScrapeError("a counter went back between two scrapes: the engine restarted during the window")
        return Counters(*values, accepted=accepted)


def parse(text: str) -> Counters:
    """The counters from one /metrics answer. Raises ScrapeError naming a missing series."""
    sums: dict[str, float] = {}
    accepted: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in (STEPS, REQUEST_STEPS, GENERATED, DRAFTS, ACCEPTED_PER_POS):
                    continue
                value = float(sample.value)
                if not math.isfinite(value) or value < 0:
                    raise ScrapeError(f"{sample.name} is {sample.value}, not a count")
                if sample.name == ACCEPTED_PER_POS:
                    position = int(sample.labels.get("position", "-1"))
                    if not 0 <= position < MAX_POSITIONS:
                        raise ScrapeError(f"{ACCEPTED_PER_POS} has position {position}")
                    accepted[position] = accepted.get(position, 0.0) + value
                else:
                    sums[sample.name] = sums.get(sample.name, 0.0) + value
    except ScrapeError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as error:  # the parser's own refusals
        raise ScrapeError(f"the /metrics answer is not Prometheus text: {type(error).__name__}") from None
    missing = [name for name in (STEPS, REQUEST_STEPS, GENERATED) if name not in sums]
    if missing:
        raise ScrapeError(f"the /metrics answer lacks {', '.join(missing)}: is this a vLLM server?")
    if accepted and sorted(accepted) != list(range(len(accepted))):
        raise ScrapeError(f"{ACCEPTED_PER_POS} skips draft positions")
    return Counters(steps=sums[STEPS], request_steps=sums[REQUEST_STEPS], generated=sums[GENERATED],
                    drafts=sums.get(DRAFTS, 0.0), accepted=tuple(accepted[i] for i in range(len(accepted))))
