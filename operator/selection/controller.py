"""Method auto, the I/O: one pass per resource reads the cache, runs policy.step, and applies what it says.

It creates the comparisons (SpeculativeInferenceCalibrations owned by the resource, run by the
calibration controller like any other) and writes only `status.selection`, by server-side apply
under its own field manager; rendering serves the candidate that field names, so a choice is a
rollout like any other change of method. It never writes spec.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from specinfer.api import API_VERSION, KIND, InvalidSpecError, parse_spec
from specinfer.api.auto import is_auto
from specinfer.api.calibration import CALIBRATION_KIND, CALIBRATION_PLURAL
from specinfer.api.resource import GROUP, VERSION
from specinfer.api.status import MetricsStatus, SelectionStatus
from specinfer.operator.plumbing.events import EventRecorder
from specinfer.operator.plumbing.kube import Kube, server_side_apply
from specinfer.operator.plumbing.store import Cache, Key, Store
from specinfer.operator.plumbing.workqueue import WorkQueue
from specinfer.operator.pure.errors import ApiError, TemporaryError
from specinfer.operator.render.labels import (
    SELECTION_LABEL,
    child_metadata,
    comparison_labels,
    comparison_owner_references,
)
from specinfer.operator.selection.pure.policy import World, refused, step

log = logging.getLogger("specinfer.operator.selection")
FIELD_MANAGER = "specinfer-selection"
MEASURING_RESYNC_SECONDS = 60.0  # a running comparison is looked at this often even without events
IDLE_RESYNC_SECONDS = 300.0      # a chosen method: traffic shifts and the interval are checked this often


def _rolling_out(status: Mapping[str, Any]) -> bool:
    return any(isinstance(condition, Mapping) and condition.get("type") == "Progressing"
               and condition.get("status") == "True" for condition in status.get("conditions") or [])


def _busy(status: Mapping[str, Any]) -> str | None:
    """A rollout, or the tuner verifying its last change: no comparison starts then (its result would
    compare engines while the resource's own load is in flux, and a switch would cut the verification)."""
    if _rolling_out(status):
        return "a rollout is in progress"
    raw = (status.get("tuning") or {}).get("policyState") if isinstance(status.get("tuning"), Mapping) else None
    try:
        state = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        state = None
    if isinstance(state, Mapping) and state.get("pending"):
        return "the tuner is verifying its last change"
    return None


def _model(model: type[MetricsStatus], raw: Any) -> MetricsStatus | None:
    try:
        return model.model_validate(raw) if isinstance(raw, Mapping) else None
    except ValidationError:
        return None


def read_selection(raw: Any) -> SelectionStatus:
    """status.selection as stored -- read back from the API server, so untrusted: a field that does not
    read (a history entry of an older release, a hand edit) is dropped, not the whole choice with it."""
    if not isinstance(raw, Mapping):
        return SelectionStatus()
    kept: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            SelectionStatus.model_validate({key: value})
        except ValidationError:
            continue
        kept[key] = value
    try:
        return SelectionStatus.model_validate(kept)
    except ValidationError:
        return SelectionStatus()


def _engine_failing(status: Mapping[str, Any]) -> str | None:
    """The engine pods fail to start or serve (the reconciler's Ready reason EngineFailing or RolloutFailed)."""
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready" \
                and condition.get("reason") in ("EngineFailing", "RolloutFailed"):
            message = condition.get("message")
            return str(message)[:512] if message else str(condition.get("reason"))
    return None


def _ours(calibration: Mapping[str, Any], resource: Mapping[str, Any]) -> bool:
    """A comparison this resource created and that still runs (a finished one would decide with old figures)."""
    meta = calibration.get("metadata") or {}
    uid = (resource.get("metadata") or {}).get("uid")
    labelled = (meta.get("labels") or {}).get(SELECTION_LABEL) == (resource.get("metadata") or {}).get("name")
    owned = any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or [] if isinstance(ref, Mapping))
    phase = (calibration.get("status") or {}).get("phase")
    return labelled and owned and phase not in ("Succeeded", "Failed")


def comparison_manifest(resource: Mapping[str, Any], name: str, spec: Any) -> dict[str, Any]:
    meta = resource["metadata"]
    return {
        "apiVersion": API_VERSION, "kind": CALIBRATION_KIND,
        # deleted with the resource (garbage collection); the calibration controller runs it
        "metadata": child_metadata(meta["name"], meta.get("namespace"), comparison_owner_references(meta),
                                   child_name=name, labels=comparison_labels(meta["name"])),
        "spec": spec.to_json(),
    }


class SelectionController:
    def __init__(self, *, kube: Kube, store: Store, calibrations: Cache, events: EventRecorder,
                 active: Callable[[], bool] = lambda: True, clock: Callable[[], float] = time.time,
                 window_seconds: float = 120.0) -> None:
        self.kube, self.store, self.calibrations, self.events = kube, store, calibrations, events
        self.active, self.clock = active, clock
        self.window_seconds = window_seconds  # the tuner's: how far back a status.metrics window reaches
        self.queue: WorkQueue[Key] = WorkQueue(self.reconcile, workers=1)
        self._due: dict[Key, float] = {}  # the next timed pass per resource (one timer each, not one per pass)

    def on_resource_event(self, key: Key) -> None:
        resource = self.store.resources.get(key)
        if resource is not None and ((resource.get("spec") or {}).get("speculation") or {}).get("method") == "auto":
            self.queue.add(key)

    def on_calibration_event(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(SELECTION_LABEL)
        if owner:
            self.queue.add((meta.get("namespace", ""), owner))

    def start(self) -> None:
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()

    async def _comparison(self, namespace: str, name: str | None) -> dict[str, Any] | None:
        if not name:
            return None
        cached = self.calibrations.get((namespace, name))
        if cached is not None:
            return cached
        # not cached (yet): after an operator restart the resource's events can come before the calibrations'.
        # Not put into the shared cache: a late answer must not bring back an object the watch saw deleted.
        found: dict[str, Any] | None = await self.kube.get(
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{CALIBRATION_PLURAL}/{name}")
        return found

    async def reconcile(self, key: Key) -> None:
        resource = self.store.resources.get(key)
        if resource is None or (resource.get("metadata") or {}).get("deletionTimestamp"):
            self._due.pop(key, None)
            return
        try:
            spec = parse_spec(resource.get("spec") or {})
        except InvalidSpecError:
            return  # the reconciler reports it (Ready=False, InvalidSpec)
        if not is_auto(spec):
            self._due.pop(key, None)
            return
        if not self.active():
            raise TemporaryError("standby: another operator replica acts", delay=MEASURING_RESYNC_SECONDS)
        namespace, name = key
        status = resource.get("status") or {}
        selection = read_selection(status.get("selection"))
        measuring = selection.phase == "Measuring"
        effective = status.get("effective")
        method = effective.get("method") if isinstance(effective, Mapping) else None
        world = World(name=name, spec=spec, selection=selection,
                      calibration=await self._comparison(namespace, selection.calibration) if measuring else None,
                      metrics=_model(MetricsStatus, status.get("metrics")),
                      effective_method=method if isinstance(method, str) else None,
                      engine_failing=_engine_failing(status), busy=_busy(status),
                      rolling_out=_rolling_out(status), window_seconds=self.window_seconds, now=self.clock())
        result = step(world)
        if result.create is not None:
            comparison, comparison_spec = result.create
            problem = await self._create(resource, comparison_manifest(resource, comparison, comparison_spec))
            if problem is not None:
                started = result.selection  # Measuring, with the comparison's name and number
                result = refused(replace(world, selection=started), problem)
        if result.selection != selection:
            await self._write(resource, result.selection)
        if result.event is not None:
            type_, reason, message = result.event
            await self.events.record(resource, type_=type_, reason=reason, message=message)
        resync = MEASURING_RESYNC_SECONDS if result.selection.phase == "Measuring" else IDLE_RESYNC_SECONDS
        soon = result.wake_at - world.now if result.wake_at is not None else resync
        self._look_again(key, min(resync, max(1.0, soon)))

    def _look_again(self, key: Key, delay: float) -> None:
        now = time.monotonic()
        due = self._due.get(key)
        if due is not None and now < due <= now + delay:
            return  # a pass is already due sooner
        self._due[key] = now + delay
        self.queue.add_after(key, delay)

    async def _create(self, resource: Mapping[str, Any], manifest: dict[str, Any]) -> str | None:
        """Create the comparison; why it cannot be (the API server refused it: quota, an admission policy, no
        RBAC; or the name is taken by something else), or None. A transient error (throttling, the API server
        away) is raised and retried by the queue."""
        meta = manifest["metadata"]
        try:  # POST, never an apply: the operator may create a comparison, never write an existing spec
            created = await self.kube.create(manifest, field_manager=FIELD_MANAGER)
        except ApiError as error:
            if error.status == 409:  # an earlier pass created it and its status write failed: use it if ours
                found = await self._comparison(meta["namespace"], meta["name"])
                if found is not None and _ours(found, resource):
                    return None
                return (f"cannot create comparison {meta['name']}: a SpeculativeInferenceCalibration of that name "
                        "exists and is not this resource's running comparison (the next one takes the next number)")
            if error.retryable:
                raise
            log.warning("comparison %s refused: %s", meta["name"], error)
            return f"cannot create comparison {meta['name']}: HTTP {error.status} {error.message}"
        created.setdefault("kind", CALIBRATION_KIND)
        self.calibrations.put(created)
        log.info("created comparison %s/%s", meta["namespace"], meta["name"])
        return None

    async def _write(self, resource: Mapping[str, Any], selection: SelectionStatus) -> None:
        meta = resource["metadata"]
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace")},
                "status": {"selection": selection.to_json()}}
        written = await server_side_apply(self.kube, body, field_manager=FIELD_MANAGER, subresource="status")
        if written:
            written.setdefault("kind", KIND)
            self.store.put_resource(written)
