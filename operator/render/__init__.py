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
from specinfer.api.parse import data_parallel_size
from specinfer.api.status import EffectiveConfig, ScheduleEntry
from specinfer.operator.access import image_refusal
from specinfer.operator.config import OperatorConfig
from specinfer.operator.errors import NotAllowedError
from specinfer.operator.render.configmap import build_configmap
from specinfer.operator.render.deployment import build_deployment
from specinfer.operator.render.labels import owner_references
from specinfer.operator.render.podmonitor import build_podmonitor
from specinfer.operator.render.service import build_service
from specinfer.operator.render.workload import Workload
from specinfer.runtime.methods.accelerators.model import ModelRunner
from specinfer.runtime.methods.engine_truth import model_runner, schedule_support

# The Service takes the resource's name, and label values are limited to 63 characters.
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Rendering:
    manifests: list[dict[str, Any]]
    config_hash: str
    speculation: EffectiveSpeculation
    spec: SpeculativeInferenceSpec | None = None  # the effective spec the manifests were built from

    def effective_status(self) -> EffectiveConfig:
        """status.effective: what the pods run once the rollout finishes."""
        speculation = self.speculation
        schedule = [ScheduleEntry(min_batch_size=s, max_batch_size=e, num_speculative_tokens=k)
                    for s, e, k in speculation.schedule or ()]
        runner, piecewise = None, None
        if self.spec is not None:
            runner, piecewise = engine_mode(self.spec, speculation)
        return EffectiveConfig(method=speculation.method, num_speculative_tokens=speculation.num_speculative_tokens,
                               schedule=schedule or None, config_hash=self.config_hash, model_runner=runner,
                               piecewise_cuda_graphs=piecewise)

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
           namespace: str | None = None) -> Rendering:
    """Every child of one SpeculativeInference, in apply order (ConfigMap before the pods that mount it).

    Raises InvalidSpecError for a spec (or name) that cannot serve. A tuned choice in
    status.tuning.applied that no longer fits the spec is an InvalidSpecError at
    `status.tuning.applied` too (the tuner wrote something the API would refuse). An image the
    operator configuration does not allow is a NotAllowedError (reason ImageNotAllowed).
    """
    meta = dict(resource.get("metadata") or {})
    check_name(meta.get("name", ""))
    spec = parse_spec(resource.get("spec") or {})
    applied = applied_tuning(resource)
    try:
        merged = effective_spec(spec, applied)
    except (ValueError, InvalidSpecError) as error:  # pydantic ValidationError is a ValueError
        if applied is None:
            raise
        raise InvalidSpecError("status.tuning.applied",
                               f"status.tuning.applied does not fit the spec: {error}") from None
    speculation = speculation_of(merged)
    workload = Workload(
        name=meta["name"],
        namespace=namespace or meta.get("namespace") or "default",
        owners=owner_references(meta),
        spec=merged,
        speculation=speculation,
        profile=config.profile(merged.hardware.accelerator),
        model_cache=config.model_cache,
    )
    if merged.runtime.image:
        allowed, configured = config.image_allowlist()
        refused = image_refusal(merged.runtime.image, allowed, configured=configured)
        if refused is not None:
            raise NotAllowedError("spec.runtime.image", refused.message, reason=refused.reason)
    manifests = [build_configmap(workload), build_deployment(workload), build_service(workload)]
    if podmonitor:
        manifests.append(build_podmonitor(workload))
    return Rendering(manifests=manifests, config_hash=workload.config_hash, speculation=speculation, spec=merged)
