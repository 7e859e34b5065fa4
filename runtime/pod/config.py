"""Read the RuntimeConfig the operator mounts into the pod (runtime/contract/runtime_config.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specinfer.runtime.contract.runtime_config import (
    RUNTIME_CONFIG_ENV,
    RUNTIME_CONFIG_PATH,
    InvalidSpecError,
    RuntimeConfig,
    parse_runtime_config,
)


class MisconfigurationError(Exception):
    """Something in the config (or the pod) that stops the engine from starting; names the field and the fix."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(message if message.startswith(field) else f"{field}: {message}")


def config_path(flag: str | None) -> Path:
    """--config wins, then $SPECINFER_CONFIG, then the mounted default."""
    return Path(flag or os.environ.get(RUNTIME_CONFIG_ENV) or RUNTIME_CONFIG_PATH)


def load_runtime_config(path: Path) -> RuntimeConfig:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise MisconfigurationError(
            "config", f"runtime config {path} not found: mount the RuntimeConfig there, "
            f"set ${RUNTIME_CONFIG_ENV} or pass --config") from None
    except OSError as error:
        raise MisconfigurationError("config", f"cannot read runtime config {path}: {error.strerror}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as error:
        raise MisconfigurationError(
            "config", f"runtime config {path} is not JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(obj, dict):
        raise MisconfigurationError("config", f"runtime config {path} must be a JSON object")
    if obj.get("kind") != "RuntimeConfig":
        raise MisconfigurationError("kind", f"kind must be RuntimeConfig in {path}, got {obj.get('kind')!r}")
    try:
        return parse_runtime_config(obj)
    except InvalidSpecError as error:
        raise MisconfigurationError(error.field_path, str(error)) from None
