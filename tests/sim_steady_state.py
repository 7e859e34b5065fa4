"""Steady state of an engine under Poisson load, from the pure model (no simulation).

Little's law closes the loop: the running batch B equals the arrival rate times
each request's decode time, which itself depends on B through T(B, K). A fixed
point of B = qps * steps_per_request * T_eff(B) gives the per-token latency at
that load. Used to check the QPS-shaped published figures (MTP 1.6x at 1 QPS
falling to ~1.0x at 6-8 QPS) quickly and deterministically; the discrete-event
engine reproduces the same shape with noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from specinfer.runtime.sim.model import AcceptanceProfile, CostModel, CostShape


@dataclass(frozen=True)
class SteadyState:
    batch_size: float
    step_time_s: float  # including the amortised prefill share
    per_token_s: float  # decode time per output token (vLLM's request_time_per_output_token)
    tokens_per_s: float
    saturated: bool  # the engine cannot keep up at this load


def steady_state(
    cost: CostModel,
    profile: AcceptanceProfile,
    *,
    k: int,
    cost_shape: CostShape | None,
    qps: float,
    prompt_tokens: int,
    output_tokens: int,
    max_batch_size: int = 256,
    draft_scale: float = 1.0,
) -> SteadyState:
    """Fixed point of the running batch size at `qps` (damped iteration, bounded by max_batch_size)."""
    expected = profile.expected_tokens(k) if k > 0 else 1.0
    prefill_share = qps * cost.prefill_time(prompt_tokens)  # fraction of each second spent prefilling
    saturated = prefill_share >= 0.95
    prefill_share = min(prefill_share, 0.95)

    def step(batch: float) -> float:
        return cost.step_time(batch, k, cost_shape, draft_scale=draft_scale) / (1.0 - prefill_share)  # type: ignore[arg-type]

    batch = 1.0
    for _ in range(200):
        wanted = qps * (output_tokens / expected) * step(max(batch, 1.0))
        new_batch = min(float(max_batch_size), max(1.0, wanted))
        if abs(new_batch - batch) < 1e-6:
            break
        batch = 0.5 * batch + 0.5 * new_batch
    step_s = step(batch)
    if qps * (output_tokens / expected) * step_s > max_batch_size * 1.001:
        saturated = True
    return SteadyState(
        batch_size=batch,
        step_time_s=step_s,
        per_token_s=step_s / expected,
        tokens_per_s=batch * expected / step_s,
        saturated=saturated,
    )
