"""SpeculativeInference watch events -> cache + reconcile queue (create, update, resume alike)."""

from __future__ import annotations

from typing import Any

import kopf

from specinfer.api import GROUP, PLURAL, VERSION


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def speculativeinference_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
        memo.controller.on_resource_event(event)
