"""What the operator hands a pod: the RuntimeConfig, where the pod finds it, and what the pod needs of the spec.

The operator renders it into a ConfigMap child of the resource (operator/render/workload.py), mounted at
RUNTIME_CONFIG_PATH; the pod reads it (runtime/pod/config.py) and runs the engine it describes. The pod
side reaches the API through this module alone (an import contract in pyproject.toml): the names
re-exported below are all it needs of the spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from specinfer.api.base import ApiModel, Name
from specinfer.api.effective import speculation_of
from specinfer.api.parse import InvalidSpecError, invalid_spec_error, parse_spec
from specinfer.api.resource import API_VERSION, ApiVersion
from specinfer.api.spec import SpeculativeInferenceSpec

RUNTIME_CONFIG_KIND: Final = "RuntimeConfig"
RUNTIME_CONFIG_PATH = "/etc/specinfer/runtime.json"
RUNTIME_CONFIG_ENV = "SPECINFER_CONFIG"


class LiveScheduleFiles(ApiModel):
    """Where an engine retuned in place reads its published schedule and writes what is in force."""

    file: str = Field(min_length=1, max_length=256)
    """The mounted schedule file (a ConfigMap child of the resource, mounted as a directory)."""
    state_file: str = Field(min_length=1, max_length=256)
    """Where the engine writes the schedule in force (in a writable emptyDir), read by its telemetry."""
    max_num_speculative_tokens: int = Field(ge=1, le=64)
    """The engine's startup maximum K: a published schedule above it is refused (it needs a restart)."""


class RuntimeConfig(ApiModel):
    """What the operator hands a pod (JSON file, default /etc/specinfer/runtime.json, env SPECINFER_CONFIG).

    `spec` is the EFFECTIVE spec: the user's spec with the tuned K / schedule merged in,
    so the runtime never needs the resource's status.
    """

    api_version: ApiVersion = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["RuntimeConfig"] = RUNTIME_CONFIG_KIND
    name: Name
    namespace: Name
    spec: SpeculativeInferenceSpec
    live_schedule: LiveScheduleFiles | None = None
    """Set when the engine is retuned in place (live_schedule/envelope.py): vLLM runs specinfer's scheduler
    class."""


def parse_runtime_config(obj: Mapping[str, Any]) -> RuntimeConfig:
    """Validate the operator -> pod RuntimeConfig; its spec goes through parse_spec."""
    spec = parse_spec(obj.get("spec") or {})
    try:
        return RuntimeConfig.model_validate({**obj, "spec": spec})
    except ValidationError as error:
        raise invalid_spec_error(error, "runtimeConfig") from None


__all__ = [
    "RUNTIME_CONFIG_ENV", "RUNTIME_CONFIG_KIND", "RUNTIME_CONFIG_PATH", "InvalidSpecError", "LiveScheduleFiles",
    "RuntimeConfig", "SpeculativeInferenceSpec", "parse_runtime_config", "speculation_of",
]
