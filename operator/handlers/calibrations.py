"""SpeculativeInferenceCalibration watch events -> the calibration controller's cache and queue (no logic here).

Its Jobs and their pods arrive through the children handler (label app.kubernetes.io/managed-by),
which routes anything labelled specinfer.io/calibration to the same controller.
"""

from __future__ import annotations

from typing import Any

import kopf

from specinfer.api import GROUP, VERSION
from specinfer.api.calibration import CALIBRATION_PLURAL


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.event(GROUP, VERSION, CALIBRATION_PLURAL, registry=registry)
    def calibration_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
        memo.controller.on_calibration_event(event)
