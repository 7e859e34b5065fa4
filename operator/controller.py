"""Wires the pieces: API client, cache, reconciler, work queue, periodic resync."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specinfer.api import KIND
from specinfer.operator.calibration.reconciler import FIELD_MANAGER as CALIBRATION_FIELD_MANAGER
from specinfer.operator.calibration.reconciler import CalibrationController
from specinfer.operator.inference.reconciler import Reconciler
from specinfer.operator.plumbing.events import EventRecorder
from specinfer.operator.plumbing.kube import Kube
from specinfer.operator.plumbing.leadership import Leadership
from specinfer.operator.plumbing.store import Store, owner_key
from specinfer.operator.plumbing.workqueue import WorkQueue
from specinfer.operator.pure.config import OperatorConfig
from specinfer.operator.render.labels import CALIBRATION_LABEL, CHILD_SELECTOR
from specinfer.operator.render.podmonitor import PODMONITOR_API_VERSION, PODMONITOR_CRD
from specinfer.operator.selection.controller import FIELD_MANAGER as SELECTION_FIELD_MANAGER
from specinfer.operator.selection.controller import SelectionController

log = logging.getLogger("specinfer.operator")

CHILD_KINDS = (("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Service"))
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
STATS_SECONDS = float(os.environ.get("SPECINFER_STATS_SECONDS", "60"))


@dataclass
class Options:
    """What `specinfer operator` was started with."""

    config: OperatorConfig = field(default_factory=OperatorConfig)
    namespaces: tuple[str, ...] = ()   # empty: all namespaces
    peering: str | None = "specinfer"
    identity: str = ""                 # our kopf peering identity (operator_cli.own_identity)
    priority: int = 0                  # our kopf peering priority


class Controller:
    def __init__(self, options: Options, api_client: Any) -> None:
        config = options.config
        self.options = options
        self.kube = Kube(api_client, qps=config.rate_limit.qps,
                         burst=config.rate_limit.burst, threads=config.workers)
        self.store = Store()
        # each writer posts its Events under its own field manager ("Who writes what")
        self.reconciler = Reconciler(kube=self.kube, store=self.store, config=config,
                                     events=EventRecorder(self.kube, field_manager=config.field_manager),
                                     requeue=lambda key: self.queue.add(key))
        self.queue = WorkQueue(self.reconciler.reconcile, workers=config.workers)
        self.leadership = Leadership(self.kube, peering=options.peering, namespaces=options.namespaces,
                                     identity=options.identity, priority=options.priority)
        self.calibrations = CalibrationController(kube=self.kube, store=self.store, config=config,
                                                  events=EventRecorder(self.kube,
                                                                       field_manager=CALIBRATION_FIELD_MANAGER),
                                                  active=self.leadership.active)
        # method auto: compares the candidates by calibrations and names the one to serve (docs/selection.md)
        self.selection = SelectionController(kube=self.kube, store=self.store,
                                             calibrations=self.calibrations.calibrations,
                                             events=EventRecorder(self.kube, field_manager=SELECTION_FIELD_MANAGER),
                                             active=self.leadership.active,
                                             window_seconds=config.tuning.window_seconds)
        self.resync_task: asyncio.Task | None = None
        self.stats_task: asyncio.Task | None = None
        self.leadership_task: asyncio.Task | None = None
        self._resyncing = True  # last state logged by _resync

    def _scopes(self) -> list[str | None]:
        return list(self.options.namespaces) or [None]

    async def detect_podmonitor(self) -> None:
        try:
            found = await self.kube.get(CRD_PATH + PODMONITOR_CRD) is not None
        except Exception as error:  # noqa: BLE001 -- no RBAC to read CRDs: run without PodMonitors
            log.warning("cannot check for the PodMonitor CRD (%s); not rendering PodMonitors", error)
            found = False
        if found != self.store.podmonitor_crd:
            log.info("Prometheus Operator PodMonitor CRD %s", "found" if found else "absent")
            self.store.podmonitor_crd = found
            for key in list(self.store.resources):
                self.queue.add(key)

    async def prime(self) -> None:
        """Fill the child cache before the first reconcile, so a restart re-applies nothing that matches."""
        kinds = list(CHILD_KINDS) + ([(PODMONITOR_API_VERSION, "PodMonitor")] if self.store.podmonitor_crd else [])
        for scope in self._scopes():
            for api_version, kind in kinds:
                for item in await self.kube.list(api_version, kind, namespace=scope, label_selector=CHILD_SELECTOR):
                    self.store.put_child(item)

    async def start(self) -> None:
        await self.detect_podmonitor()
        await self.prime()
        await self.leadership.refresh()
        self.leadership_task = asyncio.create_task(self.leadership.run(), name="leadership")
        self.queue.start()
        self.calibrations.start()
        self.selection.start()
        self.resync_task = asyncio.create_task(self._resync(), name="resync")
        self.stats_task = asyncio.create_task(self._stats(), name="stats")
        log.info("controller started: %d children cached, %d workers, resync every %.0fs",
                 len(self.store.children), self.queue.workers, self.options.config.resync_seconds)

    async def _resync(self) -> None:
        """The safety net for anything a watch missed: re-check every resource periodically."""
        while True:
            await asyncio.sleep(self.options.config.resync_seconds)
            # a paused (standby) replica's cache is stale: re-queueing it could re-apply old state
            if not self.leadership.active():
                if self._resyncing:
                    log.info("standby: not resyncing while another replica is active")
                    self._resyncing = False
                continue
            if not self._resyncing:
                log.info("active again: resyncing")
                self._resyncing = True
            await self.detect_podmonitor()
            for key in list(self.store.resources):
                self.queue.add(key)

    async def _stats(self) -> None:
        """A periodic line with the operator's own API traffic (benchmarks read it; /metrics is issue 7's)."""
        while True:
            await asyncio.sleep(STATS_SECONDS)
            log.info("stats: requests=%s reconciles=%d errors=%d resources=%d",
                     dict(sorted(self.kube.requests.items())), self.queue.processed, self.queue.errors,
                     len(self.store.resources))

    async def stop(self) -> None:
        for task in (self.resync_task, self.stats_task, self.leadership_task):
            if task:
                task.cancel()
        await self.queue.stop()
        await self.calibrations.stop()
        await self.selection.stop()
        self.kube.close()

    # ---- fed by kopf's watch events -------------------------------------------------
    def on_resource_event(self, event: Mapping[str, Any]) -> None:
        body = event["object"]
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        self.calibrations.on_target_event(key)  # calibrations waiting for (or measuring) this resource
        if event.get("type") == "DELETED":
            self.store.drop_resource(key)
            return
        self.store.put_resource(body)
        self.selection.on_resource_event(key)
        status = body.get("status") or {}
        new_work = (status.get("observedGeneration") != meta.get("generation")
                    or self.store.child("Deployment", key[0], key[1]) is None)
        self.queue.add(key, urgent=new_work)

    def on_calibration_event(self, event: Mapping[str, Any]) -> None:
        self.calibrations.on_event(event)
        self.selection.on_calibration_event(event["object"])  # method auto's comparisons

    def on_child_event(self, event: Mapping[str, Any]) -> None:
        body = event["object"]
        meta = body.get("metadata") or {}
        if CALIBRATION_LABEL in (meta.get("labels") or {}):  # a calibration's Job, pod or ConfigMap
            self.calibrations.on_child_event(event)
            return
        if event.get("type") == "DELETED" and body.get("kind") == "Pod":
            self.store.drop_pod(body)
        elif event.get("type") == "DELETED":
            self.store.drop_child(body.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))
        else:
            self.store.put_child(body)
        owner = owner_key(body)
        if owner is not None and owner in self.store.resources:
            self.queue.add(owner)


__all__ = ["KIND", "Controller", "Options"]
