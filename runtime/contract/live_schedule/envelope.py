"""Which specs are retuned in place, and what their engines start with. Pure.

A resource is retuned in place when the tuner applies its choices (`tuning.mode: auto`), the engine
follows a published schedule (vLLM with the operator's scheduler class, or the simulator) and vLLM
honours a Dynamic SD schedule for this method here (`schedule_support`: not with data parallelism >
1, not for a drafter Model Runner V1 cannot step with a per-step K, not under a platform plugin that
replaces vLLM's scheduler). Such an engine starts once with an envelope (`max_k`, the
`LiveEnvelope`) and a startup schedule; every choice of the same method with K in [0, max_k] is then
a new schedule file, not a new pod. A change of method, speculation off entirely, or a K above the
envelope still rolls out.

The envelope is the largest K the tuner may choose, except for a model drafter that drafts the K it
was started with on every step whatever the schedule (runtime/methods/drafting.py: vLLM 0.33.0's
standalone draft model, multi-module MTP -- any MTP whose spec does not state one module -- and block
drafters on Model Runner V2): its envelope is the
K in force, the largest K of what should run. In place a schedule keeps that K somewhere and lowers what
is verified elsewhere; a config with another largest K rolls out -- a larger one to draft more, a smaller
one to draft less on every step (issue 43: a draft model kept at its startup K drafts it at the peak
whatever it verifies). Started at the tuning maximum, a draft model would pay that many draft passes on
every step, whatever the published schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specinfer.api.effective import ADAPTIVE_KEY, EffectiveSpeculation, effective_spec, speculation_of
from specinfer.api.parse import data_parallel_size
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.speculation import MAX_SCHEDULE_RANGES
from specinfer.api.status import ScheduleEntry, SpeculationChoice
from specinfer.runtime.methods import DEFAULT_COST_MODEL, cost_model, get_accelerator, get_method
from specinfer.runtime.methods.engine_truth import drafting, schedule_support

Ranges = tuple[tuple[int, int, int], ...]
# Engines that read the published schedule: vLLM through specinfer's scheduler class, and the simulator.
LIVE_ENGINES = ("vllm", "simulator")
OPEN_END = 65536  # the last range reaches past any engine's max_num_seqs (vLLM cuts it there)


@dataclass(frozen=True)
class LiveEnvelope:
    """What an in-place engine is started with: every in-place schedule stays within it."""

    method: str
    max_k: int  # num_speculative_tokens at start-up: the largest K a live schedule may use
    model_runner: str  # "v1" or "v2": V2 captures CUDA graphs for the startup schedule's K values
    # the drafter drafts max_k on every step whatever the schedule: the envelope is the K in force
    drafts_max_k: bool = False

    def after(self, method: str, ks: list[int]) -> LiveEnvelope:
        """The envelope the pods run once a config of `method` with these K values is applied: the same
        where it runs in place, else the one a rollout starts (for a drafter that drafts max_k, the
        config's own largest K)."""
        if self.admits(method, ks) or not self.drafts_max_k or method != self.method or not ks or max(ks) <= 0:
            return self
        return replace(self, max_k=max(ks))

    def admits(self, method: str, ks: list[int]) -> bool:
        """A config of `method` with these K values runs in place (K > 0 somewhere: a drafter loaded; for a
        drafter that drafts max_k, max_k itself somewhere: another largest K is another envelope)."""
        if method != self.method or not ks or min(ks) < 0:
            return False
        return max(ks) == self.max_k if self.drafts_max_k else 0 < max(ks) <= self.max_k


def why_not_in_place(spec: SpeculativeInferenceSpec) -> str | None:
    """Why `spec` is retuned by rollouts only (None: it is retuned in place)."""
    method = get_method(spec.speculation.method)
    if spec.tuning.mode != "auto":
        return f"tuning mode {spec.tuning.mode}: the tuner applies nothing"
    if not method.speculates:
        return "method none: there is no draft length to retune"
    if spec.runtime.engine not in LIVE_ENGINES:
        return f"engine {spec.runtime.engine} does not read a published schedule"
    if spec.speculation.advanced is not None and set(spec.speculation.advanced.model_dump(exclude_none=True)) - {
            ADAPTIVE_KEY}:  # adaptive verification verifies within the scheduled K (adaptive_verification.py:335)
        return "spec.speculation.advanced ties K to other settings: every K change is checked at start-up"
    release = get_accelerator(spec.hardware.accelerator).engine
    if spec.runtime.engine == "vllm" and release.plugin_replaces_scheduler is not None:
        return (f"{release.label} replaces vLLM's scheduler with its own ({release.plugin_replaces_scheduler}), "
                "which specinfer's scheduler class has not been checked against")
    support = schedule_support(method.name, spec.hardware.accelerator,
                               data_parallel_size=data_parallel_size(spec.runtime.extra_args))
    if not support.honoured:
        return f"{support.reason} ({support.source})"
    if support.model_runner == "v2" and _max_k(spec) + 2 + len(spec.speculation.schedule or ()) > MAX_SCHEDULE_RANGES:
        return (f"Model Runner V2 needs one startup range per K up to {_max_k(spec)} to capture its CUDA graphs: "
                f"more than {MAX_SCHEDULE_RANGES} ranges; lower spec.tuning.maxNumSpeculativeTokens")
    return None


def _max_k(spec: SpeculativeInferenceSpec) -> int:
    method, accelerator = get_method(spec.speculation.method), spec.hardware.accelerator
    ceiling = method.k_max_on(accelerator)
    bound = min(spec.tuning.max_num_speculative_tokens or ceiling, ceiling)
    return max(bound, spec.speculation.num_speculative_tokens or method.default_k(accelerator))


def drafts_startup_k(spec: SpeculativeInferenceSpec) -> bool:
    """The spec's drafter pays for its startup K on every step, whatever the schedule (its engine release
    and model runner: runtime/methods/drafters.py). A lookup that fills the startup K (vLLM 0.33.0's GPU
    n-gram kernel) costs microseconds whatever K (its cost shape): its envelope need not be the K in force."""
    method = get_method(spec.speculation.method)
    fact = drafting(method.name, spec.hardware.accelerator, mtp_modules=spec.speculation.mtp_modules)
    return method.cost_shape != "lookup" and fact is not None and fact.drafts_startup_k


def live_envelope(spec: SpeculativeInferenceSpec, *, wanted_k: int | None = None,
                  running: int | None = None) -> LiveEnvelope | None:
    """The envelope an in-place engine starts with, or None when every change rolls out.

    `wanted_k`: the largest K of what should run (the applied choice, `choice_k`; None or 0: the spec's
    own); `running`: the envelope the pods run now (status.effective.liveSchedule, of this method). Both
    matter only for a drafter that drafts its startup K every step, whose envelope is the K in force:
    `wanted_k`, and `running` while what should run is speculation off (no drafter: the pods the next
    config returns to)."""
    if why_not_in_place(spec) is not None:
        return None
    support = schedule_support(spec.speculation.method, spec.hardware.accelerator,
                               data_parallel_size=data_parallel_size(spec.runtime.extra_args))
    startup = drafts_startup_k(spec)
    max_k = _max_k(spec)
    if startup:
        own = speculation_of(effective_spec(spec, None))
        wanted = wanted_k or running or own.num_speculative_tokens
        max_k = min(wanted, max_k)
    return LiveEnvelope(method=spec.speculation.method, max_k=max_k, model_runner=support.model_runner,
                        drafts_max_k=startup)


def choice_k(choice: SpeculationChoice | EffectiveSpeculation | None) -> int:
    """The largest K a choice runs (0: none, or speculation off)."""
    if choice is None:
        return 0
    ks = [entry.num_speculative_tokens if isinstance(entry, ScheduleEntry) else entry[2]
          for entry in choice.schedule or ()]
    return max([choice.num_speculative_tokens or 0, *ks])


def startup_ranges(envelope: LiveEnvelope, ranges: Ranges) -> Ranges:
    """The schedule an in-place engine is started with, given the spec's own `ranges` (K capped at the
    envelope's: a drafter whose envelope is the K in force may run below the spec's own K).

    On Model Runner V1 it is the spec's own. On Model Runner V2 vLLM captures its decode CUDA graphs
    for the K values of the startup schedule only (vllm/v1/worker/gpu/cudagraph_utils.py builds the
    decode query lengths from the dense startup lookup), so K = max_k, max_k - 1, ..., 0 each get one
    batch size at the low end (1 .. max_k + 1) and the spec's schedule follows from there. The engine
    runs this only until its scheduler reads the published file, in its constructor."""
    ranges = tuple((s, e, min(k, envelope.max_k)) for s, e, k in ranges)
    if envelope.model_runner != "v2":
        return ranges
    ladder = tuple((b, b, envelope.max_k - b + 1) for b in range(1, envelope.max_k + 2))
    start = envelope.max_k + 2
    rest = [(max(s, start), e, k) for s, e, k in ranges if e >= start]
    return ladder + (tuple(rest) if rest else ((start, OPEN_END, ranges[-1][2]),))


def ranges_of(num_speculative_tokens: int, schedule: list[tuple[int, int, int]] | None) -> Ranges:
    """A K or a schedule as explicit ranges (a single K covers every batch size)."""
    if schedule:
        return tuple((int(s), int(e), int(k)) for s, e, k in schedule)
    return ((1, OPEN_END, int(num_speculative_tokens)),)


# The batch sizes searched for the crossover: past vLLM's default max_num_seqs (256) and the simulator's
CROSSOVER_SEARCH = 4096


def _covering(ranges: Ranges) -> Ranges:
    """The same schedule with each range reaching the next one and the last one open-ended: vLLM runs a batch
    size in a gap or past the last range at the range before it, so the crossover is searched there too."""
    return tuple((start, max(end, ranges[i + 1][0] - 1 if i + 1 < len(ranges) else OPEN_END), k)
                 for i, (start, end, k) in enumerate(ranges))


def own_ranges(spec: SpeculativeInferenceSpec, envelope: LiveEnvelope) -> Ranges:
    """What an in-place engine runs before the tuner has chosen: the spec's own K or schedule, drafting less
    above the batch size where the catalogue's step-cost preset predicts that drafting stops paying.

    Above that crossover the spec's K gives way to the cheapest K the spec allows there -- K = 0 (no drafts;
    a model drafter still runs its K = 0 work, priced as its engine runs it) where spec.tuning lets the tuner
    switch drafting off, else the tuning minimum -- in one more range. At batch 200 a K too high costs far
    more than one too low (issue 43: a peak met at start-up ran the tuning maximum), and the tuner corrects
    the split in place from its first windows. The preset is the simulator's cost model, or for vLLM the
    tuner's default prior (`DEFAULT_COST_MODEL`, an 8B target on an H100: the same roofline); the acceptance
    is the method's simulator profile on the simulator's workload (chat for vLLM). A split that would not fit
    vLLM's schedule ranges with Model Runner V2's startup ladder is left out."""
    own = speculation_of(effective_spec(spec, None))
    ranges = ranges_of(own.num_speculative_tokens, own.schedule)
    method = get_method(spec.speculation.method)
    low = spec.tuning.min_num_speculative_tokens
    cheapest = 0 if not low else max(low, method.k_min)
    simulator = spec.runtime.simulator if spec.runtime.engine == "simulator" else None
    preset = cost_model(simulator.cost_model if simulator is not None else DEFAULT_COST_MODEL)
    workload = simulator.workload if simulator is not None else "chat"
    fact = drafting(method.name, spec.hardware.accelerator,
                    spec.speculation.advanced.model_dump(exclude_none=True) if spec.speculation.advanced else None,
                    mtp_modules=spec.speculation.mtp_modules)
    profile = method.simulator

    def speed(batch: int, k: int) -> float:
        seconds = preset.step_time(batch, k, method.cost_shape, draft_scale=profile.draft_scale, speculative=True,
                                   drafting=fact, startup_k=envelope.max_k)
        return profile.expected_tokens(workload, k) / seconds

    split: list[tuple[int, int, int]] = []
    # searched over what vLLM runs (gaps and past the end at the range before), kept as written where no split
    for (start, end, k), (_, reach, _) in zip(ranges, _covering(ranges), strict=True):
        # the crossover: from the range's reach down, as far as the cheapest K stays ahead
        crossover = None
        for b in range(min(reach, CROSSOVER_SEARCH), start - 1, -1):
            if k <= cheapest or speed(b, cheapest) <= speed(b, k):
                break
            crossover = b
        if crossover is None:
            split.append((start, end, k))
            continue
        split += [(start, crossover - 1, k)] if crossover > start else []
        split.append((crossover, reach, cheapest))
    merged = _merged(split)
    if len(startup_ranges(envelope, merged)) > MAX_SCHEDULE_RANGES or not any(k > 0 for _, _, k in merged):
        return ranges
    return merged


def _merged(ranges: list[tuple[int, int, int]]) -> Ranges:
    """Neighbouring ranges of one K as one."""
    out: list[tuple[int, int, int]] = []
    for start, end, k in ranges:
        if out and out[-1][2] == k and out[-1][1] + 1 == start:
            out[-1] = (out[-1][0], end, k)
        else:
            out.append((start, end, k))
    return tuple(out)


def initial_choice(spec: SpeculativeInferenceSpec) -> SpeculationChoice | None:
    """What runs before the tuner has applied anything: `own_ranges` for a spec retuned in place (None
    otherwise: the spec as written). The renderer publishes it and the tuner reads it as the config in force."""
    envelope = live_envelope(spec)
    if envelope is None:
        return None
    return _choice(own_ranges(spec, envelope))


def _choice(ranges: Ranges) -> SpeculationChoice:
    top = max(k for _, _, k in ranges)
    if len(ranges) == 1:
        return SpeculationChoice(num_speculative_tokens=top)
    return SpeculationChoice(num_speculative_tokens=top, schedule=[
        ScheduleEntry(min_batch_size=s, max_batch_size=e, num_speculative_tokens=k) for s, e, k in ranges])


def startup_spec(spec: SpeculativeInferenceSpec, envelope: LiveEnvelope, *,
                 adaptive_verification: bool | None = None) -> SpeculativeInferenceSpec:
    """The effective spec an in-place engine starts from: the spec's own choice (`own_ranges`) as its
    startup schedule, under K = envelope.max_k, verifying adaptively as `adaptive_verification` says (the
    tuner's choice: None, the spec's). Only that choice moves the pod template and its config hash (a
    rollout): a retune within the envelope changes only the published schedule."""
    ranges = startup_ranges(envelope, own_ranges(spec, envelope))
    choice = SpeculationChoice(num_speculative_tokens=envelope.max_k, schedule=[
        ScheduleEntry(min_batch_size=s, max_batch_size=e, num_speculative_tokens=k) for s, e, k in ranges],
        adaptive_verification=adaptive_verification)
    return effective_spec(spec, choice)
