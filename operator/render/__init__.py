"""Pure rendering: resource (+ status.tuning.applied) + operator config -> the child manifests.

The operator applies exactly what `render` returns, and `specinfer render` prints it;
there is no other code path. No I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specinfer.api import (
    EffectiveSpeculation,
    InvalidSpecError,
    SpeculativeInferenceSpec,
    effective_spec,
    parse_spec,
    speculation_of,
)
from specinfer.api.adaptive_rules import adaptive_on
from specinfer.api.auto import applied_for, is_auto, selected_candidate, serving_spec
from specinfer.api.parse import data_parallel_size
from specinfer.api.status import EffectiveConfig, LiveScheduleStatus, ScheduleEntry
from specinfer.operator.pure.access import image_refusal
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.pure.errors import NotAllowedError
from specinfer.operator.render.configmap import build_configmap, build_live_schedule_configmap
from specinfer.operator.render.deployment import build_deployment
from specinfer.operator.render.labels import live_schedule_configmap_name, owner_references
from specinfer.operator.render.podmonitor import build_podmonitor
from specinfer.operator.render.service import build_service
from specinfer.operator.render.workload import LivePlan, Workload
from specinfer.runtime.contract.live_schedule.envelope import (
    LiveEnvelope,
    choice_k,
    initial_choice,
    live_envelope,
    own_ranges,
    ranges_of,
    startup_spec,
)
from specinfer.runtime.contract.live_schedule.published import ScheduleRefused, parse_published, schedule_digest
from specinfer.runtime.methods import get_method
from specinfer.runtime.methods.accelerators.model import ModelRunner
from specinfer.runtime.methods.engine_truth import model_runner, schedule_support

# The Service takes the resource's name, and label values are limited to 63 characters.
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Rendering:
    manifests: list[dict[str, Any]]
    config_hash: str
    speculation: EffectiveSpeculation  # what the engine runs: the tuner's choice merged over the spec
    spec: SpeculativeInferenceSpec | None = None  # the effective spec the pods start from
    live: LivePlan | None = None  # an engine retuned in place: the schedule published to it

    def effective_status(self) -> EffectiveConfig:
        """status.effective: what the pods run once the rollout (or the published schedule) is in force."""
        speculation = self.speculation
        schedule = [ScheduleEntry(min_batch_size=s, max_batch_size=e, num_speculative_tokens=k)
                    for s, e, k in speculation.schedule or ()]
        runner, piecewise = None, None
        if self.spec is not None:
            # an in-place engine always runs under a schedule (its startup one at least)
            runner, piecewise = engine_mode(self.spec, speculation_of(self.spec) if self.live else speculation)
        live = None
        if self.live is not None and self.spec is not None:
            live = LiveScheduleStatus(max_num_speculative_tokens=self.live.envelope.max_k,
                                      digest=schedule_digest(self.live.ranges),
                                      config_map=self.live.config_map)
        advanced = self.spec.speculation.advanced if self.spec is not None else None
        drafts = speculation.num_speculative_tokens > 0
        adaptive = drafts and bool(getattr(advanced, "enable_adaptive_verification", None))
        support = (get_method(speculation.method).accelerators.get(self.spec.hardware.accelerator)
                   if self.spec is not None else None)
        return EffectiveConfig(method=speculation.method, num_speculative_tokens=speculation.num_speculative_tokens,
                               schedule=schedule or None, config_hash=self.config_hash, model_runner=runner,
                               piecewise_cuda_graphs=piecewise, live_schedule=live,
                               adaptive_verification=adaptive or None,
                               evidence=support.evidence.kind if support is not None else None)

    def manifest(self, kind: str) -> dict[str, Any] | None:
        return next((m for m in self.manifests if m["kind"] == kind), None)


def engine_mode(spec: SpeculativeInferenceSpec, speculation: EffectiveSpeculation) -> tuple[ModelRunner, bool | None]:
    """The model runner vLLM picks for this config, and whether its schedule forces PIECEWISE graphs
    (None without a schedule) -- what the engine really runs, from the catalogue's engine facts."""
    advanced = spec.speculation.advanced.model_dump(exclude_none=True) if spec.speculation.advanced else None
    accelerator = spec.hardware.accelerator
    runner = model_runner(speculation.method, accelerator, advanced)
    if not speculation.schedule:
        return runner, None
    support = schedule_support(speculation.method, accelerator, advanced=advanced,
                               data_parallel_size=data_parallel_size(spec.runtime.extra_args))
    return runner, support.piecewise_graphs


def check_name(name: str) -> None:
    if not DNS_LABEL.match(name or ""):
        raise InvalidSpecError(
            "metadata.name",
            f"metadata.name {name!r} must be a DNS label (lowercase letters, digits and '-', starting with a letter, "
            "at most 63 characters): the Service and the pod labels take this name")


def applied_tuning(resource: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = resource.get("status") or {}
    return ((status.get("tuning") or {}).get("applied")) or None


def render(resource: Mapping[str, Any], config: OperatorConfig, *, podmonitor: bool = False,
           namespace: str | None = None, published_now: str | None = None) -> Rendering:
    """Every child of one SpeculativeInference, in apply order (ConfigMap before the pods that mount it).

    `published_now`: the live-schedule ConfigMap's file as it stands (the operator's cache of it), which
    a rollout away from the in-place engine keeps for the pods it replaces (`kept_for_replaced_pods`).

    Raises InvalidSpecError for a spec (or name) that cannot serve. A tuned choice in
    status.tuning.applied that no longer fits the spec is an InvalidSpecError at
    `status.tuning.applied` too (the tuner wrote something the API would refuse). An image the
    operator configuration does not allow is a NotAllowedError (reason ImageNotAllowed).
    """
    meta = dict(resource.get("metadata") or {})
    check_name(meta.get("name", ""))
    written = parse_spec(resource.get("spec") or {})
    spec = serving_spec(written, selected_candidate(resource.get("status")))  # method auto: the candidate serving
    applied = applied_tuning(resource)
    if is_auto(written):
        applied = applied_for(spec, applied)
    # retuned in place, before any tuning: the spec's own choice, drafting less above the predicted crossover
    chosen = applied if applied is not None else initial_choice(spec)
    try:
        merged = effective_spec(spec, chosen)
    except (ValueError, InvalidSpecError) as error:  # pydantic ValidationError is a ValueError
        if applied is None:
            raise
        raise InvalidSpecError("status.tuning.applied",
                               f"status.tuning.applied does not fit the spec: {error}") from None
    speculation = speculation_of(merged)
    envelope = live_envelope(spec, wanted_k=choice_k(speculation), running=running_envelope(resource, spec))
    live = _live_plan(envelope, speculation, meta["name"])
    # the tuner's choice of adaptive verification (a rollout) reaches the engine's start
    started = startup_spec(spec, live.envelope, adaptive_verification=adaptive_on(merged)) if live is not None \
        else merged
    workload = Workload(
        name=meta["name"],
        namespace=namespace or meta.get("namespace") or "default",
        owners=owner_references(meta),
        spec=started,
        speculation=speculation_of(started) if live is not None else speculation,
        profile=config.profile(merged.hardware.accelerator),
        model_cache=config.model_cache,
        live=live,
    )
    if merged.runtime.image:
        allowed, configured = config.image_allowlist()
        refused = image_refusal(merged.runtime.image, allowed, configured=configured)
        if refused is not None:
            raise NotAllowedError("spec.runtime.image", refused.message, reason=refused.reason)
    manifests = [build_configmap(workload)]
    if envelope is not None:  # before the Deployment: its pods mount it
        published = live.ranges if live is not None else (
            kept_for_replaced_pods(published_now, spec) or own_ranges(spec, envelope))
        manifests.append(build_live_schedule_configmap(workload, published))
    manifests += [build_deployment(workload), build_service(workload)]
    if podmonitor:
        manifests.append(build_podmonitor(workload))
    return Rendering(manifests=manifests, config_hash=workload.config_hash, speculation=speculation, spec=started,
                     live=live)


def kept_for_replaced_pods(text: str | None, spec: SpeculativeInferenceSpec) -> tuple[tuple[int, int, int], ...] | None:
    """What the schedule ConfigMap keeps while a rollout starts pods that do not read it (speculation off, a
    method the tuner applies over a fixed spec): the schedule the pods being replaced follow now, not the spec's
    own. Those pods serve until they are gone -- under Surge the whole load for a model load, then their
    drain -- and the spec's own schedule drafts more where the tuner measured it should not (a pod being
    replaced at batch 63 drafted K=2 where the tuner's schedule said K=1). None where nothing valid is
    published yet. (A `method: auto` switch to a candidate retuned in place publishes that candidate's
    schedule instead: its `live` plan is not None.)"""
    if not text or not isinstance(text, str):
        return None
    ceiling = get_method(spec.speculation.method).k_max_on(spec.hardware.accelerator)
    try:
        return parse_published(text, max_k=ceiling).ranges
    except ScheduleRefused:
        return None


def running_envelope(resource: Mapping[str, Any], spec: SpeculativeInferenceSpec) -> int | None:
    """The envelope the pods run now, as the last rendering recorded it (status.effective.liveSchedule),
    for the spec's method; a drafter that drafts its startup K keeps it while what runs fits in it."""
    effective = (resource.get("status") or {}).get("effective") or {}
    live = effective.get("liveSchedule") or {}
    k = live.get("maxNumSpeculativeTokens")
    return k if effective.get("method") == spec.speculation.method and isinstance(k, int) and k > 0 else None


def _live_plan(envelope: LiveEnvelope | None, speculation: EffectiveSpeculation, name: str) -> LivePlan | None:
    """The in-place plan when the spec is retuned in place and what should run fits its envelope."""
    if envelope is None or not get_method(speculation.method).speculates:
        return None
    ranges = ranges_of(speculation.num_speculative_tokens, speculation.schedule)
    if not envelope.admits(speculation.method, [k for _, _, k in ranges]):
        return None
    return LivePlan(envelope=envelope, ranges=ranges, config_map=live_schedule_configmap_name(name))
