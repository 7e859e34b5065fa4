"""Level-based reconcile of one SpeculativeInference: read the cached world, converge, report.

Every pass does the same thing whatever triggered it (create, update, resume, a child
edited or deleted, a periodic resync): render the desired children, server-side apply
those whose live copy differs, then write status if it differs. A pass over a converged
resource makes no API request. The resource's spec and metadata are never written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from specinfer.api import API_VERSION, KIND, InvalidSpecError
from specinfer.api.status import Condition, EffectiveConfig, SpeculativeInferenceStatus
from specinfer.api.timestamps import rfc3339
from specinfer.operator.inference.pure.engine_failures import engine_failure
from specinfer.operator.inference.pure.status import (
    Rollout,
    invalid_status,
    rollout_of,
    status_covered,
    stored_conditions,
    workload_status,
)
from specinfer.operator.plumbing.events import EventRecorder
from specinfer.operator.plumbing.kube import Kube, annotate, object_path
from specinfer.operator.plumbing.secrets import opt_in_refusal
from specinfer.operator.plumbing.store import Key, Store, controlled_by
from specinfer.operator.pure.access import (
    CHILD_CONFLICT,
    IMAGE_NOT_ALLOWED,
    SECRET_NOT_ALLOWED,
    Refusal,
    child_conflict,
    engine_secret_refs,
)
from specinfer.operator.pure.compare import covers
from specinfer.operator.pure.conditions import find
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.pure.errors import ApiError, TemporaryError
from specinfer.operator.render import Rendering, render
from specinfer.operator.render.labels import (
    ENGINE_SECRET_LABEL,
    LIVE_SCHEDULE_ANNOTATION,
    live_schedule_configmap_name,
)
from specinfer.runtime.contract.live_schedule import SCHEDULE_KEY

log = logging.getLogger("specinfer.operator.reconcile")
# a refused apply (quota, admission policy), a foreign object in the way or a Secret still to be labelled may
# clear without any event of ours
REJECTED_RETRY_SECONDS = 30.0
# Ready reasons announced by a Warning Event when they appear
WARNING_REASONS = ("InvalidSpec", "RolloutFailed", "ApplyRejected", CHILD_CONFLICT, IMAGE_NOT_ALLOWED,
                   SECRET_NOT_ALLOWED, "EngineFailing")


def utc_now() -> str:
    return rfc3339(time.time())


class Reconciler:
    def __init__(self, *, kube: Kube, store: Store, config: OperatorConfig, events: EventRecorder,
                 now: Callable[[], str] = utc_now, requeue: Callable[[Key], None] = lambda key: None) -> None:
        self.kube, self.store, self.config, self.events, self.now = kube, store, config, events, now
        self.requeue = requeue
        self.nudge_pods = config.nudge_pods  # switched off for this process once the API server refuses it
        self.applies = 0
        self.status_writes = 0

    async def reconcile(self, key: Key) -> None:
        resource = self.store.resources.get(key)
        if resource is None or (resource.get("metadata") or {}).get("deletionTimestamp"):
            return  # deleted: the garbage collector removes the children (ownerReferences)
        namespace, name = key
        deployment = self.store.child("Deployment", namespace, name)
        try:
            schedule = self.store.child("ConfigMap", namespace, live_schedule_configmap_name(name)) or {}
            rendering = render(resource, self.config, podmonitor=self.store.podmonitor_crd,
                               published_now=(schedule.get("data") or {}).get(SCHEDULE_KEY))
        except InvalidSpecError as error:
            rollout = rollout_of(deployment, desired_hash="", desired_replicas=0) if deployment else None
            await self._write_status(resource, invalid_status(resource=resource, message=error.describe_all(),
                                                              rollout=rollout, now=self.now(),
                                                              reason=getattr(error, "reason", "InvalidSpec")))
            return
        changed = [(manifest, self.store.child(manifest["kind"], namespace, manifest["metadata"]["name"]))
                   for manifest in rendering.manifests]
        changed = [(manifest, live) for manifest, live in changed if live is None or not covers(manifest, live)]
        refusal = await self._refusal(resource, rendering, changed)
        if refusal is not None:
            await self._report_refusal(resource, deployment, refusal)
            raise TemporaryError(f"{refusal.reason}: {namespace}/{name}", delay=REJECTED_RETRY_SECONDS)
        created = False
        published = None
        for manifest, live in changed:
            meta = manifest["metadata"]
            try:
                result = await self.kube.apply(manifest, field_manager=self.config.field_manager)
            except ApiError as error:
                if error.retryable or error.status in (401, 404):
                    raise
                await self._report_rejected(resource, deployment, manifest, error)
                raise TemporaryError(f"the API server refused {manifest['kind']} {namespace}/{meta['name']}",
                                     delay=REJECTED_RETRY_SECONDS) from error
            self.applies += 1
            result.setdefault("apiVersion", manifest["apiVersion"])
            result.setdefault("kind", manifest["kind"])
            self.store.put_child(result)
            log.info("applied %s %s/%s (%s)", manifest["kind"], namespace, meta["name"],
                     "created" if live is None else "updated")
            if manifest["kind"] == "Deployment":
                deployment, created = result, live is None
            if rendering.live is not None and meta["name"] == rendering.live.config_map and live is not None:
                published = rendering.effective_status().live_schedule
        if created:
            # A Deployment without status says nothing yet: report after its controller has looked at it
            # (its watch event re-queues us; this is the fallback). In a burst, creating every workload
            # first costs each resource 3 requests before any status write.
            self.requeue(key)
            return
        if published is not None and self.nudge_pods:
            await self._nudge(key, published.digest)
        rendered = rendering.manifest("Deployment")
        assert rendered is not None, "render() always returns a Deployment"
        spec_replicas = rendered["spec"]["replicas"]
        rollout = rollout_of(deployment, desired_hash=rendering.config_hash, desired_replicas=spec_replicas)
        failure = engine_failure(self.store.pods_of(key))
        await self._write_status(resource, workload_status(resource=resource, effective=rendering.effective_status(),
                                                           rollout=rollout, desired_replicas=spec_replicas,
                                                           now=self.now(),
                                                           engine_failure=failure.describe() if failure else None))

    async def _nudge(self, key: Key, digest: str) -> None:
        """A new schedule was published: annotate the engine pods so their kubelet refreshes the mounted
        ConfigMap now. A speed-up only -- the kubelet's periodic sync delivers it anyway -- so a failure
        is logged, and a refusal (no `patch` on pods) switches the nudge off for this process."""
        namespace, _ = key
        for pod in self.store.pods_of(key):
            meta = pod.get("metadata") or {}
            if (meta.get("annotations") or {}).get(LIVE_SCHEDULE_ANNOTATION) == digest or meta.get("deletionTimestamp"):
                continue
            target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": meta.get("name")}}
            try:  # a merge patch, not an apply: the pod may be gone by now, and an apply would create it (kube.py)
                await annotate(self.kube, target, {LIVE_SCHEDULE_ANNOTATION: digest},
                               field_manager=self.config.field_manager)
            except ApiError as error:
                if error.status == 403:
                    log.warning("cannot annotate engine pods (%s): the kubelet takes new schedules at its next "
                                "sync; grant `patch` on pods or set nudgePods: false", error)
                    self.nudge_pods = False
                    return
                log.info("nudging pod %s/%s failed: %s", namespace, meta.get("name"), error)

    async def _refusal(self, resource: dict[str, Any], rendering: Rendering,
                       changed: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> Refusal | None:
        """Why none of `changed` may be applied yet, checked before the first write (issue 15): a child name
        taken by an object this resource does not own, or a Secret the pods would read that has not opted in.
        Costs requests only when something is about to be written."""
        uid = (resource.get("metadata") or {}).get("uid")
        for manifest, live in changed:
            if live is None:  # the cache holds only labelled children: ask the API server
                live = await self.kube.get(object_path(manifest))
            if live is not None and uid and not controlled_by(live, uid):
                return child_conflict(manifest, live)
        if self.config.engine_secrets == "Labelled" and rendering.spec is not None and any(
                manifest["kind"] == "Deployment" for manifest, _ in changed):
            namespace = resource["metadata"].get("namespace", "")
            for field, name in engine_secret_refs(rendering.spec):
                refused = await opt_in_refusal(self.kube, namespace, name, field=field, label=ENGINE_SECRET_LABEL,
                                               use="engine pod", reason=SECRET_NOT_ALLOWED)
                if refused is not None:
                    return refused
        return None

    async def _report_refusal(self, resource: dict[str, Any], deployment: dict[str, Any] | None,
                              refusal: Refusal) -> None:
        rollout = rollout_of(deployment, desired_hash="", desired_replicas=0) if deployment else None
        await self._write_status(resource, invalid_status(resource=resource, message=refusal.message, rollout=rollout,
                                                          now=self.now(), reason=refusal.reason))

    async def _report_rejected(self, resource: dict[str, Any], deployment: dict[str, Any] | None,
                               manifest: dict[str, Any], error: ApiError) -> None:
        """Say in status why nothing happens: without this a refused child (quota exhausted, an admission
        policy, a field the API server refuses) left the resource with no status at all (issue 9)."""
        message = (f"the API server refused the {manifest['kind']} {manifest['metadata']['name']} "
                   f"(HTTP {error.status}): {error.message or error}")
        rollout = rollout_of(deployment, desired_hash="", desired_replicas=0) if deployment else None
        await self._write_status(resource, invalid_status(resource=resource, message=message, rollout=rollout,
                                                          now=self.now(), reason="ApplyRejected"))

    async def _announce_rollout(self, resource: dict[str, Any], before: str | None, effective: EffectiveConfig) -> None:
        what = f"method {effective.method}, K={effective.num_speculative_tokens}"
        if effective.schedule:
            what += f", schedule of {len(effective.schedule)} ranges"
        if before is None:
            message = f"created the engine Deployment ({what}, config {effective.config_hash})"
        else:
            message = f"rolling out config {before} -> {effective.config_hash} ({what}), one pod at a time"
        await self.events.record(resource, type_="Normal", reason="RolloutStarted", message=message)

    async def _write_status(self, resource: dict[str, Any], model: SpeculativeInferenceStatus) -> None:
        current = resource.get("status") or {}
        status = model.to_json()
        if status_covered(status, current):
            return
        meta = resource["metadata"]
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace")}, "status": status}
        result = await self.kube.apply(body, field_manager=self.config.field_manager, subresource="status")
        self.status_writes += 1
        self.store.put_resource(result)
        before = (current.get("effective") or {}).get("configHash")
        if model.effective is not None and model.effective.config_hash != before:
            # announced once, when status starts reporting the new config
            await self._announce_rollout(resource, before, model.effective)
        await self._announce_conditions(resource, find(stored_conditions(resource), "Ready"),
                                        find(model.conditions, "Ready"))

    async def _announce_conditions(self, resource: dict[str, Any], before: Condition | None,
                                   after: Condition | None) -> None:
        if after is None or (before is not None and (before.status, before.reason) == (after.status, after.reason)):
            return
        if after.reason in WARNING_REASONS:
            await self.events.record(resource, type_="Warning", reason=after.reason, message=after.message or "")
        elif after.status == "True":
            await self.events.record(resource, type_="Normal", reason="Ready", message=after.message or "")


__all__ = ["Reconciler", "Rollout", "covers"]
