"""Which specs are retuned in place, and what their engines start with. Pure.

A resource is retuned in place when the tuner applies its choices (`tuning.mode: auto`), the engine
follows a published schedule (vLLM with the operator's scheduler class, or the simulator) and vLLM
honours a Dynamic SD schedule for this method here (`schedule_support`: not with data parallelism >
1, not for a drafter Model Runner V1 cannot step with a per-step K). Such an engine starts once with
the largest K the tuner may choose (`max_k`, the `LiveEnvelope`) and a startup schedule; every choice
of the same method with K in [0, max_k] is then a new schedule file, not a new pod. A change of
method, speculation off entirely, or a K above the envelope still rolls out.
"""

from __future__ import annotations

from dataclasses import dataclass

from specinfer.api.effective import effective_spec, speculation_of
from specinfer.api.parse import data_parallel_size
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.speculation import MAX_SCHEDULE_RANGES
from specinfer.api.status import ScheduleEntry, SpeculationChoice
from specinfer.runtime.methods import get_accelerator, get_method
from specinfer.runtime.methods.engine_truth import schedule_support

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

    def admits(self, method: str, ks: list[int]) -> bool:
        """A config of `method` with these K values runs in place (K > 0 somewhere: a drafter loaded)."""
        return method == self.method and bool(ks) and 0 < max(ks) <= self.max_k and min(ks) >= 0


def why_not_in_place(spec: SpeculativeInferenceSpec) -> str | None:
    """Why `spec` is retuned by rollouts only (None: it is retuned in place)."""
    method = get_method(spec.speculation.method)
    if spec.tuning.mode != "auto":
        return f"tuning mode {spec.tuning.mode}: the tuner applies nothing"
    if not method.speculates:
        return "method none: there is no draft length to retune"
    if spec.runtime.engine not in LIVE_ENGINES:
        return f"engine {spec.runtime.engine} does not read a published schedule"
    if spec.speculation.advanced is not None and spec.speculation.advanced.model_dump(exclude_none=True):
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


def live_envelope(spec: SpeculativeInferenceSpec) -> LiveEnvelope | None:
    """The envelope an in-place engine starts with, or None when every change rolls out."""
    if why_not_in_place(spec) is not None:
        return None
    support = schedule_support(spec.speculation.method, spec.hardware.accelerator,
                               data_parallel_size=data_parallel_size(spec.runtime.extra_args))
    return LiveEnvelope(method=spec.speculation.method, max_k=_max_k(spec), model_runner=support.model_runner)


def startup_ranges(envelope: LiveEnvelope, ranges: Ranges) -> Ranges:
    """The schedule an in-place engine is started with, given the spec's own `ranges`.

    On Model Runner V1 it is the spec's own. On Model Runner V2 vLLM captures its decode CUDA graphs
    for the K values of the startup schedule only (vllm/v1/worker/gpu/cudagraph_utils.py builds the
    decode query lengths from the dense startup lookup), so K = max_k, max_k - 1, ..., 0 each get one
    batch size at the low end (1 .. max_k + 1) and the spec's schedule follows from there. The engine
    runs this only until its scheduler reads the published file, in its constructor."""
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


def startup_spec(spec: SpeculativeInferenceSpec, envelope: LiveEnvelope) -> SpeculativeInferenceSpec:
    """The effective spec an in-place engine starts from: the spec's own choice as its startup schedule,
    under K = envelope.max_k. It does not depend on the tuner's choice, so neither do the pod template
    and its config hash: a retune within the envelope changes only the published schedule."""
    own = speculation_of(effective_spec(spec, None))
    ranges = startup_ranges(envelope, ranges_of(own.num_speculative_tokens, own.schedule))
    choice = SpeculationChoice(num_speculative_tokens=envelope.max_k, schedule=[
        ScheduleEntry(min_batch_size=s, max_batch_size=e, num_speculative_tokens=k) for s, e, k in ranges])
    return effective_spec(spec, choice)
