"""The configuration that actually runs: spec + the tuner's applied choice (status.tuning.applied).

The operator merges them once with `effective_spec(...)` (validated: a tuner bug cannot render a
config the API would refuse), renders from the result and writes it into the pod's RuntimeConfig;
`speculation_of(...)` derives what that spec runs (status.effective, the --speculative-config JSON)
without validating again. Tuned values never touch the resource's spec (GitOps tools see no drift).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.status import SpeculationChoice
from specinfer.runtime.methods import get_method

ADAPTIVE_KEY = "enable_adaptive_verification"  # spec.speculation.advanced's field for vLLM's adaptive verification


@dataclass(frozen=True)
class EffectiveSpeculation:
    method: str
    num_speculative_tokens: int          # 0: running without speculation
    schedule: list[tuple[int, int, int]] | None
    speculative_config: dict[str, Any] | None   # exact --speculative-config JSON; None: omit the flag
    engine_args: tuple[str, ...] = ()    # catalogue pins for this method on this accelerator
    env: Mapping[str, str] = field(default_factory=dict)


def _choice(applied: SpeculationChoice | Mapping[str, Any] | None) -> SpeculationChoice | None:
    if applied is None or isinstance(applied, SpeculationChoice):
        return applied
    return SpeculationChoice.model_validate(dict(applied))


def effective_spec(
    spec: SpeculativeInferenceSpec, applied: SpeculationChoice | Mapping[str, Any] | None = None
) -> SpeculativeInferenceSpec:
    """The spec with the tuned K / schedule merged in, with every default made explicit.

    An applied K of 0 means "speculation off": the result has method none (vLLM refuses
    num_speculative_tokens = 0). Re-validated, so a tuner bug cannot render a config the
    API would have refused. The rule "tuning mode auto needs a speculative method" is about what
    the user wrote, not about the tuner switching speculation off, so the result then says mode
    observe: nothing reads the effective spec's tuning (the loop reads the resource's own spec, and
    pods never carry `tuning`).
    """
    choice = _choice(applied)
    speculation = spec.speculation.model_dump()
    if choice is not None:
        if choice.method is not None and choice.method != spec.speculation.method:
            speculation = {"method": choice.method}  # a method switch drops method-specific settings
        if choice.num_speculative_tokens is not None:
            speculation["num_speculative_tokens"] = choice.num_speculative_tokens
            speculation["schedule"] = None
        if choice.schedule:
            speculation["schedule"] = [entry.model_dump() for entry in choice.schedule]
        if choice.adaptive_verification is not None:  # the tuner's lever: the rest of `advanced` stays the spec's
            advanced = {**(speculation.get("advanced") or {}), ADAPTIVE_KEY: choice.adaptive_verification or None}
            speculation["advanced"] = {k: v for k, v in advanced.items() if v is not None} or None
    method = get_method(speculation["method"])
    if speculation.get("num_speculative_tokens") is None:
        speculation["num_speculative_tokens"] = method.default_k(spec.hardware.accelerator)
    if method.speculates and speculation["num_speculative_tokens"] == 0:
        speculation = {"method": "none", "num_speculative_tokens": 0}
    merged = spec.model_dump()
    merged["speculation"] = speculation
    if (not get_method(speculation["method"]).speculates and get_method(spec.speculation.method).speculates
            and spec.tuning.mode == "auto"):
        merged["tuning"] = {**merged["tuning"], "mode": "observe"}
    return SpeculativeInferenceSpec.model_validate(merged)


def speculation_of(spec: SpeculativeInferenceSpec) -> EffectiveSpeculation:
    """Method, K, schedule, --speculative-config and catalogue pins that a parsed spec runs (an unset K
    is the catalogue's default). Pass the `effective_spec` to include the tuner's choice."""
    speculation, accelerator = spec.speculation, spec.hardware.accelerator
    method = get_method(speculation.method)
    support = method.accelerators[accelerator]
    k = speculation.num_speculative_tokens
    schedule = (
        [(r.min_batch_size, r.max_batch_size, r.num_speculative_tokens) for r in speculation.schedule]
        if speculation.schedule else None
    )
    return EffectiveSpeculation(
        method=method.name,
        num_speculative_tokens=method.default_k(accelerator) if k is None else k,
        schedule=schedule,
        speculative_config=method.speculative_config(speculation, accelerator),
        engine_args=support.engine_args if method.vllm_method else (),
        env=dict(support.env),
    )


def effective_speculation(
    spec: SpeculativeInferenceSpec, applied: SpeculationChoice | Mapping[str, Any] | None = None
) -> EffectiveSpeculation:
    """What the pods run with `applied` merged over `spec` (validated once)."""
    return speculation_of(effective_spec(spec, applied))
