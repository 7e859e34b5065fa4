"""The status the reconciler reports, computed from the rendering and the observed Deployment. Pure.

Ready/Progressing/Degraded follow kstatus: Ready=True only once the Deployment has
rolled out the current config hash to every replica; `observedGeneration` says which
spec the conditions describe, so `kubectl wait --for=condition=Ready` and Argo CD /
Flux health checks do not read a stale answer. Built from the `specinfer.api.status` models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specinfer.api.status import Condition, EffectiveConfig, SpeculativeInferenceStatus
from specinfer.operator.pure.compare import covers
from specinfer.operator.pure.conditions import ConditionUpdate, set_conditions
from specinfer.operator.render.labels import CONFIG_HASH_ANNOTATION, NAME_LABEL
from specinfer.runtime.methods import methods_without_drafts


@dataclass(frozen=True)
class Rollout:
    """What the Deployment says about rolling out `desired_hash` to `desired_replicas`."""

    done: bool
    failed: bool
    reason: str
    message: str
    replicas: int
    ready_replicas: int
    running_hash: str | None


# A surge pod needs room for one more replica's accelerators; on a cluster with none to spare it stays
# Pending and the Deployment only says "timed out progressing" -- say what to change.
SURGE_HINT = ("; the new pod may not fit (no room for a surge pod): set spec.updateStrategy: Replace "
              "on clusters with no spare accelerator")


def _surges(deployment: Mapping[str, Any]) -> bool:
    """The live Deployment starts new pods before old ones stop (spec.updateStrategy Surge)."""
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return False
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")  # the API server's default
    return str(surge).rstrip("%") not in ("0", "")


def rollout_of(deployment: Mapping[str, Any] | None, *, desired_hash: str, desired_replicas: int) -> Rollout:
    if deployment is None:
        return Rollout(False, False, "Creating", "creating the engine Deployment", 0, 0, None)
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    template_hash = ((deployment.get("spec") or {}).get("template", {}).get("metadata", {})
                     .get("annotations", {}).get(CONFIG_HASH_ANNOTATION))
    replicas, ready = status.get("replicas") or 0, status.get("readyReplicas") or 0
    updated, available = status.get("updatedReplicas") or 0, status.get("availableReplicas") or 0
    observed = (status.get("observedGeneration") or 0) >= (meta.get("generation") or 0)
    for condition in status.get("conditions") or []:
        if (condition.get("type") == "Progressing" and condition.get("status") == "False") or \
                (condition.get("type") == "ReplicaFailure" and condition.get("status") == "True"):
            reason = condition.get("reason") or "RolloutFailed"
            message = condition.get("message") or "the Deployment reports a failed rollout"
            if reason == "ProgressDeadlineExceeded" and _surges(deployment):
                message += SURGE_HINT
            return Rollout(False, True, reason, message, replicas, ready, template_hash)
    done = (observed and template_hash == desired_hash and updated == desired_replicas
            and replicas == desired_replicas and available == desired_replicas)
    if done:
        return Rollout(True, False, "Available", f"{ready}/{desired_replicas} replicas ready", replicas, ready,
                       template_hash)
    return Rollout(False, False, "RolloutInProgress",
                   f"rolling out config {desired_hash}: {updated}/{desired_replicas} updated, "
                   f"{available}/{desired_replicas} available, {replicas} pods", replicas, ready, template_hash)


def _describe(effective: EffectiveConfig) -> str:
    method, k = effective.method, effective.num_speculative_tokens
    if effective.schedule:
        return f"{method} with a batch-size schedule (K <= {k})"
    return f"{method}" if method in methods_without_drafts() else f"{method} K={k}"


def stored_conditions(resource: Mapping[str, Any]) -> list[Condition]:
    """The resource's conditions as stored; an entry that does not read as a condition is left out
    (it is rewritten by its owner on its next write)."""
    out = []
    for item in (resource.get("status") or {}).get("conditions") or []:
        try:
            out.append(Condition.model_validate(item))
        except ValidationError:
            continue
    return out


def workload_status(*, resource: Mapping[str, Any], effective: EffectiveConfig, rollout: Rollout,
                    desired_replicas: int, now: str, engine_failure: str | None = None) -> SpeculativeInferenceStatus:
    """Status for a valid spec (only the fields this reconciler owns). `engine_failure` describes an
    engine pod that crash-loops or cannot start (operator/inference/pure/engine_failures.py)."""
    meta = resource.get("metadata") or {}
    generation = meta.get("generation")
    current = stored_conditions(resource)
    if engine_failure is not None and not rollout.failed:
        updates = [
            ConditionUpdate("Ready", "False", "EngineFailing", engine_failure),
            ConditionUpdate("Progressing", "True" if not rollout.done else "False", "EngineFailing",
                            "waiting for the engine to start: the pod restarts it with a back-off"),
            ConditionUpdate("Degraded", "True", "EngineFailing", engine_failure),
        ]
    elif rollout.done:
        updates = [
            ConditionUpdate("Ready", "True", "Available",
                            f"{rollout.ready_replicas}/{desired_replicas} replicas ready, "
                            f"running {_describe(effective)}"),
            ConditionUpdate("Progressing", "False", "RolloutComplete", f"config {effective.config_hash} rolled out"),
            ConditionUpdate("Degraded", "False", "AsExpected", "no problems observed"),
        ]
    elif rollout.failed:
        updates = [
            ConditionUpdate("Ready", "False", "RolloutFailed", rollout.message),
            ConditionUpdate("Progressing", "False", rollout.reason, rollout.message),
            ConditionUpdate("Degraded", "True", rollout.reason, rollout.message),
        ]
    else:
        updates = [
            ConditionUpdate("Ready", "False", rollout.reason, rollout.message),
            ConditionUpdate("Progressing", "True", rollout.reason, rollout.message),
            ConditionUpdate("Degraded", "False", "AsExpected", "no problems observed"),
        ]
    return SpeculativeInferenceStatus(
        observed_generation=generation,
        conditions=set_conditions(current, updates, generation=generation, now=now),
        replicas=rollout.replicas,
        ready_replicas=rollout.ready_replicas,
        effective=effective,
        selector=f"{NAME_LABEL}={meta.get('name')}",
    )


WAITING = {"InvalidSpec": "waiting for a valid spec", "ApplyRejected": "retrying the refused apply",
           "ChildConflict": "waiting for the conflicting object to go (checked every 30 s)",
           "EngineSecretNotAllowed": "waiting for the Secret to opt in (checked every 30 s)"}


def invalid_status(*, resource: Mapping[str, Any], message: str, rollout: Rollout | None, now: str,
                   reason: str = "InvalidSpec") -> SpeculativeInferenceStatus:
    """Status for a spec that cannot serve (InvalidSpec), that the operator configuration refuses
    (ImageNotAllowed, EngineSecretNotAllowed), whose children the API server refused (ApplyRejected: quota,
    admission policy) or whose child names are taken (ChildConflict). A workload from an earlier valid
    spec keeps running."""
    meta = resource.get("metadata") or {}
    generation = meta.get("generation")
    previous = resource.get("status") or {}
    if rollout is not None and rollout.replicas:
        message = f"{message} (the workload of the last valid spec keeps running)"
    waiting = WAITING.get(reason, "waiting until the operator configuration allows the spec")
    updates = [
        ConditionUpdate("Ready", "False", reason, message),
        ConditionUpdate("Progressing", "False", reason, waiting),
        ConditionUpdate("Degraded", "True", reason, message),
    ]
    effective = None
    if previous.get("effective") and rollout is not None and rollout.replicas:
        try:
            effective = EffectiveConfig.model_validate(previous["effective"])
        except ValidationError:
            effective = None
    return SpeculativeInferenceStatus(
        observed_generation=generation,
        conditions=set_conditions(stored_conditions(resource), updates, generation=generation, now=now),
        replicas=rollout.replicas if rollout else 0,
        ready_replicas=rollout.ready_replicas if rollout else 0,
        effective=effective,
        selector=f"{NAME_LABEL}={meta.get('name')}",
    )


def status_covered(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
    """True when writing `desired` (the JSON of a status) would change nothing (conditions compared by
    type: others own other types)."""
    live = live or {}
    rest = {key: value for key, value in desired.items() if key != "conditions"}
    if not covers(rest, live):
        return False
    live_conditions = {c.get("type"): c for c in live.get("conditions") or []}
    return all(covers(c, live_conditions.get(c["type"])) for c in desired.get("conditions") or [])
