"""The calibration controller: level-based reconcile of SpeculativeInferenceCalibrations. I/O.

Each pass reads the cached world (the calibration, its target from the operator's cache, the
Jobs and pods labelled with the calibration's name), lets the pure `status.step` decide, and
acts: creates the next Jobs (and the ConfigMap of engine configs), stops Jobs of a failed run,
writes the calibration's status, and on success writes the target's `status.calibration` with a
field manager of its own (`specinfer-calibration`), so the reconciler's and the tuner's status
fields are never touched. It never writes the target's spec, its Deployment, Service or pods.
A finished run (Succeeded or Failed) is never acted on again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specinfer.api import API_VERSION, KIND, InvalidSpecError, SpeculativeInferenceSpec, parse_spec
from specinfer.api.auto import selected_candidate, serving_spec
from specinfer.api.calibration import (
    CALIBRATION_KIND,
    SpeculativeInferenceCalibrationSpec,
    SpeculativeInferenceCalibrationStatus,
)
from specinfer.api.timestamps import rfc3339
from specinfer.operator.calibration.pure import status as steps
from specinfer.operator.calibration.pure.render import (
    Engine,
    Plan,
    build_engines_configmap,
    build_job,
    check_name,
    engines_configmap_name,
    job_name,
    plan,
)
from specinfer.operator.plumbing.events import EventRecorder
from specinfer.operator.plumbing.kube import Kube, delete, object_path, server_side_apply
from specinfer.operator.plumbing.secrets import opt_in_refusal
from specinfer.operator.plumbing.store import Cache, Key, Store, controlled_by
from specinfer.operator.plumbing.workqueue import WorkQueue
from specinfer.operator.pure.access import (
    SECRET_NOT_ALLOWED,
    Refusal,
    engine_secret_refs,
    image_refusal,
)
from specinfer.operator.pure.compare import covers
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.pure.errors import ApiError, TemporaryError
from specinfer.operator.render.labels import (
    CALIBRATION_LABEL,
    CANDIDATE_LABEL,
    ENGINE_SECRET_LABEL,
    JOB_NAME_LABEL,
    K_LABEL,
)
from specinfer.runtime.contract.calibration.prompts import PromptsError, parse_prompts

log = logging.getLogger("specinfer.operator.calibration")
FIELD_MANAGER = "specinfer-calibration"
WAIT_RETRY_SECONDS = 30.0  # a missing target or prompts ConfigMap may appear without an event of ours
SAFETY_RESYNC_SECONDS = 60.0  # a running calibration is looked at this often even without events


def utc_now() -> str:
    return rfc3339(time.time())


@dataclass(frozen=True)
class _Halt:
    """Why a pass stops before stepping the run: a failure (the run ends Failed) or a wait (retried)."""

    reason: str
    message: str
    failed: bool = False


@dataclass(frozen=True)
class _Inputs:
    """What a pass steps the run with: the spec, the target and the plan of engines to measure."""

    spec: SpeculativeInferenceCalibrationSpec
    target: dict[str, Any]
    target_spec: SpeculativeInferenceSpec
    plan: Plan


class CalibrationController:
    def __init__(self, *, kube: Kube, store: Store, config: OperatorConfig, events: EventRecorder,
                 active: Callable[[], bool] = lambda: True, now: Callable[[], str] = utc_now,
                 workers: int = 2) -> None:
        self.kube, self.store, self.config, self.events = kube, store, config, events
        self.active, self.now = active, now
        # the Store's cache style: a late watch event never replaces the answer to our own newer write
        self.calibrations, self.jobs, self.pods, self.configmaps = Cache(), Cache(), Cache(), Cache()
        self.queue: WorkQueue[Key] = WorkQueue(self.reconcile, workers=workers)

    # ---- fed by kopf's watch events ------------------------------------------------------
    def on_event(self, event: Mapping[str, Any]) -> None:
        body = event["object"]
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event.get("type") == "DELETED":
            self.calibrations.pop(key, None)
            return
        self.queue.add(self.calibrations.put(body))

    def on_child_event(self, event: Mapping[str, Any]) -> None:
        """A Job, pod or ConfigMap labelled with a calibration's name."""
        body = event["object"]
        meta = body.get("metadata") or {}
        cache = {"Job": self.jobs, "Pod": self.pods, "ConfigMap": self.configmaps}.get(body.get("kind", ""))
        if cache is None:
            return
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event.get("type") == "DELETED":
            cache.pop(key, None)
        else:
            cache.put(body)
        owner = (meta.get("labels") or {}).get(CALIBRATION_LABEL)
        if owner:
            self.queue.add((key[0], owner))

    def on_target_event(self, key: Key) -> None:
        """A SpeculativeInference changed: calibrations waiting for it (or running on it) look again."""
        namespace, name = key
        for (ns, calibration), body in list(self.calibrations.items()):
            if ns == namespace and ((body.get("spec") or {}).get("targetRef") or {}).get("name") == name:
                self.queue.add((ns, calibration))

    def start(self) -> None:
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()

    # ---- one pass ------------------------------------------------------------------------
    async def reconcile(self, key: Key) -> None:
        resource = self.calibrations.get(key)
        if resource is None or (resource.get("metadata") or {}).get("deletionTimestamp"):
            return  # deleted: its Jobs and ConfigMap go with it (ownerReferences)
        try:
            current = SpeculativeInferenceCalibrationStatus.model_validate(resource.get("status") or {})
        except ValidationError:
            current = SpeculativeInferenceCalibrationStatus()
        if current.phase in steps.TERMINAL:
            return
        if not self.active():
            raise TemporaryError("standby: another operator replica acts", delay=SAFETY_RESYNC_SECONDS)
        inputs = await self._read_inputs(resource, current)
        if isinstance(inputs, _Halt):
            await self._halt(resource, current, inputs)
            return
        namespace, name = key
        outcomes = {engine.key: steps.engine_outcome(*self._job_and_pod(namespace, job_name(name, engine)))
                    for engine in inputs.plan.engines}
        result = steps.step(spec=inputs.spec, current=current, the_plan=inputs.plan, outcomes=outcomes,
                            generation=resource["metadata"].get("generation"), now=self.now(), calibration=name)
        if result.start:
            halted = await self._start(resource, inputs, result.start)
            if halted is not None:
                await self._halt(resource, current, halted)
                return
        await self._apply(resource, result, inputs.target)
        if result.status.phase == "Running":
            self.queue.add_after(key, SAFETY_RESYNC_SECONDS)

    async def _read_inputs(self, resource: dict[str, Any],
                           current: SpeculativeInferenceCalibrationStatus) -> _Inputs | _Halt:
        """The spec, the target and the plan of engines -- or why this pass cannot go on."""
        namespace, name = resource["metadata"]["namespace"], resource["metadata"]["name"]
        try:
            check_name(name)
            spec = SpeculativeInferenceCalibrationSpec.model_validate(resource.get("spec") or {})
        except InvalidSpecError as error:
            return _Halt("InvalidSpec", str(error), failed=True)
        except ValidationError as error:  # admission checks the same models: only a CRD out of step gets here
            return _Halt("InvalidSpec", f"spec: {error.errors()[0]['msg']}", failed=True)
        target_name = spec.target_ref.name
        target = self.store.resources.get((namespace, target_name))
        if target is None:
            return _Halt("TargetNotFound", f"spec.targetRef.name: SpeculativeInference {target_name} not found in "
                         f"namespace {namespace}: create it or fix the name")
        try:
            target_spec = serving_spec(parse_spec(target.get("spec") or {}), selected_candidate(target.get("status")))
        except InvalidSpecError as error:
            return _Halt("TargetInvalid", f"spec.targetRef.name: SpeculativeInference {target_name} has an invalid "
                         f"spec ({error}); fix it first")
        try:
            the_plan = plan(spec, target_spec)
        except InvalidSpecError as error:
            return _Halt("InvalidCandidate", str(error), failed=True)
        if current.start_time is None:
            problem = await self._prompts_problem(namespace, spec)
            if problem is not None:
                return _Halt("PromptsUnreadable", problem)
        conflict = await self._conflict(resource, the_plan)
        if conflict is not None:
            return _Halt("ChildConflict", conflict, failed=True)
        return _Inputs(spec, target, target_spec, the_plan)

    async def _start(self, resource: dict[str, Any], inputs: _Inputs, engines: Sequence[Engine]) -> _Halt | None:
        """Start these engines' Jobs (after the ConfigMap they read), or say why not."""
        refused = await self._refusal(resource["metadata"]["namespace"], inputs.target_spec)
        if refused is not None:
            return _Halt(refused.reason, f"the target's {refused.message}")
        target_name = inputs.spec.target_ref.name
        await self._ensure_configmap(resource, target_name, inputs.plan)
        for engine in engines:
            conflict = await self._create_job(resource, build_job(resource["metadata"], inputs.spec, target_name,
                                                                  engine, self.config))
            if conflict is not None:
                return _Halt("ChildConflict", conflict, failed=True)
        return None

    async def _halt(self, resource: dict[str, Any], current: SpeculativeInferenceCalibrationStatus,
                    halt: _Halt) -> None:
        if halt.failed:
            await self._apply(resource, steps.failed(current, halt.reason, halt.message,
                                                     generation=resource["metadata"].get("generation"),
                                                     now=self.now()), None)
        else:
            await self._wait(resource, current, halt.reason, halt.message)

    async def _wait(self, resource: dict[str, Any], current: SpeculativeInferenceCalibrationStatus, reason: str,
                    message: str) -> None:
        meta = resource["metadata"]
        await self._apply(resource, steps.waiting(current, reason, message, generation=meta.get("generation"),
                                                  now=self.now()), None)
        raise TemporaryError(f"calibration {meta.get('namespace')}/{meta['name']}: {reason}", delay=WAIT_RETRY_SECONDS)

    async def _refusal(self, namespace: str, target: SpeculativeInferenceSpec) -> Refusal | None:
        """What the operator configuration refuses the target's pods (issue 15) is refused its candidates too:
        an image outside the allowlist, a Secret that has not opted in. Checked before any Job is created."""
        if target.runtime.image:
            allowed, configured = self.config.image_allowlist()
            refused = image_refusal(target.runtime.image, allowed, configured=configured)
            if refused is not None:
                return refused
        if self.config.engine_secrets == "Labelled":
            for field, name in engine_secret_refs(target):
                refused = await opt_in_refusal(self.kube, namespace, name, field=field, label=ENGINE_SECRET_LABEL,
                                               use="engine pod", reason=SECRET_NOT_ALLOWED)
                if refused is not None:
                    return refused
        return None

    async def _prompts_problem(self, namespace: str, spec: SpeculativeInferenceCalibrationSpec) -> str | None:
        if spec.prompts is None:
            return None
        ref = spec.prompts.config_map_ref
        field = "spec.prompts.configMapRef"
        configmap = await self.kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{ref.name}")
        if configmap is None:
            return f"{field}.name: ConfigMap {ref.name} not found in namespace {namespace}: create it or fix the name"
        data = configmap.get("data") or {}
        if ref.key not in data:
            keys = ", ".join(sorted(data)[:10]) or "none"
            return f"{field}.key: ConfigMap {ref.name} has no key {ref.key} (its keys: {keys})"
        try:
            parse_prompts(str(data[ref.key]))
        except PromptsError as error:
            return f"{field}: ConfigMap {ref.name} key {ref.key}: {error}"
        return None

    async def _conflict(self, resource: dict[str, Any], the_plan: Plan) -> str | None:
        """An object under one of this run's names that is not this calibration's (issue 15): its result would
        be read, or it would be applied over. Costs a GET only for names the cache does not hold."""
        meta = resource["metadata"]
        namespace, uid = meta.get("namespace", ""), meta.get("uid", "")
        names = [("Job", f"/apis/batch/v1/namespaces/{namespace}/jobs/", job_name(meta["name"], e), self.jobs)
                 for e in the_plan.engines]
        names.append(("ConfigMap", f"/api/v1/namespaces/{namespace}/configmaps/",
                      engines_configmap_name(meta["name"]), self.configmaps))
        for kind, path, name, cache in names:
            live = cache.get((namespace, name))
            if live is None and kind == "ConfigMap":
                live = await self.kube.get(path + name)
            if live is not None and uid and not controlled_by(live, uid):
                return (f"{kind} {name} exists and is not this calibration's (its controller is not "
                        f"{CALIBRATION_KIND} {meta['name']}): delete or rename it, then create the calibration again")
        return None

    def _job_and_pod(self, namespace: str, name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The Job and its newest pod -- one the Job controls: a look-alike pod's termination message is not read."""
        job = self.jobs.get((namespace, name))
        job_uid = ((job or {}).get("metadata") or {}).get("uid")
        pods = [pod for (ns, _), pod in self.pods.items()
                if ns == namespace and (pod.get("metadata", {}).get("labels") or {}).get(JOB_NAME_LABEL) == name
                and job_uid and controlled_by(pod, job_uid)]
        pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "", default=None)
        return job, pod

    async def _ensure_configmap(self, resource: dict[str, Any], target: str, the_plan: Plan) -> None:
        manifest = build_engines_configmap(resource["metadata"], target, the_plan, self.config)
        meta = manifest["metadata"]
        live = self.configmaps.get((meta["namespace"], meta["name"]))
        if live is not None and covers(manifest, live):
            return
        self.configmaps[(meta["namespace"], meta["name"])] = await self.kube.apply(manifest,
                                                                                field_manager=FIELD_MANAGER)

    async def _create_job(self, resource: dict[str, Any], manifest: dict[str, Any]) -> str | None:
        """Create once: a Job's template is immutable, so an existing one of ours (a cache that lags) is left
        alone; one that is not ours is a conflict (returned as the message)."""
        meta = manifest["metadata"]
        key = (meta["namespace"], meta["name"])
        if key in self.jobs:
            return None
        live = await self.kube.get(object_path(manifest))
        if live is not None:
            if controlled_by(live, resource["metadata"].get("uid", "")):
                return None
            return (f"Job {meta['name']} exists and is not this calibration's: delete or rename it, then create the "
                    "calibration again")
        try:
            created = await self.kube.create(manifest, field_manager=FIELD_MANAGER)
        except ApiError as error:
            if error.status == 409:
                return None
            raise
        created.setdefault("kind", "Job")
        self.jobs[key] = created
        engine = f"{meta['labels'].get(CANDIDATE_LABEL)} K={meta['labels'].get(K_LABEL)}"
        log.info("calibration %s/%s: created Job %s (%s)", key[0], resource["metadata"]["name"], meta["name"], engine)
        await self.events.record(resource, type_="Normal", reason="EngineStarted",
                                 message=f"Job {meta['name']} measures {engine}")
        return None

    async def _stop_jobs(self, resource: dict[str, Any], names: list[str]) -> None:
        """Delete these Jobs; a refused delete raises (retried) so a run is never written Failed while its
        engines still hold their accelerators."""
        namespace = resource["metadata"].get("namespace", "")
        for name in names:
            try:
                await delete(self.kube, {"apiVersion": "batch/v1", "kind": "Job",
                                         "metadata": {"namespace": namespace, "name": name}})
            except ApiError as error:
                if error.status != 404:
                    raise TemporaryError(f"cannot stop Job {namespace}/{name}: {error}", delay=10) from error
            self.jobs.pop((namespace, name), None)

    def _unfinished_jobs(self, resource: dict[str, Any]) -> list[str]:
        """This calibration's Jobs that have not finished (complete or failed), from the cache."""
        meta = resource["metadata"]
        namespace, uid = meta.get("namespace", ""), meta.get("uid", "")
        return [name for (ns, name), job in self.jobs.items()
                if ns == namespace and uid and controlled_by(job, uid)
                and not any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                            for c in (job.get("status") or {}).get("conditions") or [])]

    async def _apply(self, resource: dict[str, Any], result: steps.Step, target: dict[str, Any] | None) -> None:
        meta = resource["metadata"]
        stop = {job_name(meta["name"], engine) for engine in result.stop}
        if result.status.phase == "Failed":  # every failure path: nothing keeps running for a terminal run
            stop.update(self._unfinished_jobs(resource))
        if stop:
            await self._stop_jobs(resource, sorted(stop))
        if result.summary is not None and target is not None:
            await self._write_target(target, result)
        status = result.status.to_json()
        if status != (resource.get("status") or {}):
            body = {"apiVersion": API_VERSION, "kind": CALIBRATION_KIND,
                    "metadata": {"name": meta["name"], "namespace": meta.get("namespace")}, "status": status}
            written = await self._status_apply(body)
            if written:
                self.calibrations[(meta.get("namespace", ""), meta["name"])] = written
        for type_, reason, message in result.events:
            await self.events.record(resource, type_=type_, reason=reason, message=message)

    async def _write_target(self, target: dict[str, Any], result: steps.Step) -> None:
        """status.calibration of the target, under this controller's own field manager."""
        assert result.summary is not None
        meta = target["metadata"]
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace")},
                "status": {"calibration": result.summary.to_json()}}
        try:
            written = await self._status_apply(body)
        except ApiError as error:
            if error.status == 404:
                log.warning("calibration result not written: SpeculativeInference %s/%s is gone",
                            meta.get("namespace"), meta["name"])
                return
            raise
        if written:
            written.setdefault("kind", KIND)
            self.store.put_resource(written)
        if result.target_event is not None:
            type_, reason, message = result.target_event
            await self.events.record(target, type_=type_, reason=reason, message=message)

    async def _status_apply(self, body: dict[str, Any]) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await server_side_apply(self.kube, body, field_manager=FIELD_MANAGER,
                                                                subresource="status")
        return result
