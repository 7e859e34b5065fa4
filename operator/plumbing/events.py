"""Kubernetes Events on a SpeculativeInference for significant changes (`kubectl describe` shows them)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from specinfer.api import API_VERSION, KIND
from specinfer.api.timestamps import rfc3339

log = logging.getLogger("specinfer.operator.plumbing.events")
COMPONENT = "specinfer-operator"


def build_event(resource: Mapping[str, Any], *, type_: str, reason: str, message: str,
                now: dt.datetime) -> dict[str, Any]:
    meta = resource["metadata"]
    stamp = rfc3339(now.timestamp())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta.get("namespace")},
        "involvedObject": {"apiVersion": API_VERSION, "kind": resource.get("kind") or KIND, "name": meta["name"],
                           "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    def __init__(self, kube: Any, *, field_manager: str = COMPONENT) -> None:
        self.kube, self.field_manager = kube, field_manager

    async def record(self, resource: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Best effort: a failed Event never fails a reconcile."""
        event = build_event(resource, type_=type_, reason=reason, message=message,
                            now=dt.datetime.now(dt.UTC))
        try:
            await self.kube.create(event, field_manager=self.field_manager)
        except Exception as error:  # noqa: BLE001
            log.warning("could not post event %s on %s: %s", reason, resource["metadata"].get("name"), error)
