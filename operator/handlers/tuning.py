"""Starts the tuning loop (and the operator's /metrics) next to the controller; no logic here.

The loop reads resources from the controller's informer cache (no extra list requests),
shares its rate-limited API client, and hands each status it writes back to the cache and
the work queue, so the reconciler renders a newly applied config at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from specinfer.operator.plumbing import metrics
from specinfer.operator.plumbing.events import EventRecorder
from specinfer.operator.tuner.loop import FIELD_MANAGER as TUNER_FIELD_MANAGER
from specinfer.operator.tuner.loop import TuningLoop
from specinfer.operator.tuner.pure.settings import TunerSettings

log = logging.getLogger("specinfer.operator.tuner")


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.startup(registry=registry)
    async def start_tuning(memo: kopf.Memo, **_: Any) -> None:
        port = getattr(memo, "metrics_port", None)
        if port:
            metrics.serve(port)
        controller = memo.controller  # started by lifecycle.start, registered before this handler
        metrics.bind_controller(controller)
        config = controller.options.config
        settings = getattr(config, "tuning", None) or TunerSettings()

        def written(body: dict[str, Any]) -> None:
            meta = body["metadata"]
            controller.store.put_resource(body)
            controller.queue.add((meta.get("namespace", ""), meta["name"]))

        loop = TuningLoop(kube=controller.kube, resources=lambda: list(controller.store.resources.values()),
                          settings=settings, default_url=config.prometheus.url, on_written=written,
                          events=EventRecorder(controller.kube, field_manager=TUNER_FIELD_MANAGER),
                          active=controller.leadership.active,
                          access=config.prometheus.access(), prices=config.cost)
        memo.tuning_task = asyncio.create_task(loop.run(), name="tuning-loop")
        log.info("tuning loop started: Prometheus %s, window %.0fs, %d queries per tick",
                 config.prometheus.url or "(per resource)", settings.window_seconds, len(loop.queries))

    @kopf.on.cleanup(registry=registry)
    async def stop_tuning(memo: kopf.Memo, **_: Any) -> None:
        task = getattr(memo, "tuning_task", None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
