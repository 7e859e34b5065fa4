"""The top-level objects: the `SpeculativeInference` resource and the operator -> pod `RuntimeConfig`."""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

from pydantic import Field

from specinfer.api.base import ApiModel, Name
from specinfer.api.spec import SpeculativeInferenceSpec
from specinfer.api.status import SpeculativeInferenceStatus

# Literal types, so the models' apiVersion and kind fields take these constants as their defaults.
ApiVersion: TypeAlias = Literal["specinfer.io/v1alpha1"]
API_VERSION: ApiVersion = "specinfer.io/v1alpha1"
GROUP, VERSION = API_VERSION.split("/")
KIND: Final = "SpeculativeInference"
PLURAL = "speculativeinferences"
SINGULAR = "speculativeinference"
SHORT_NAMES = ("specinf", "si")
CRD_NAME = f"{PLURAL}.{GROUP}"

RUNTIME_CONFIG_KIND: Final = "RuntimeConfig"
RUNTIME_CONFIG_PATH = "/etc/specinfer/runtime.json"
RUNTIME_CONFIG_ENV = "SPECINFER_CONFIG"


class SpeculativeInference(ApiModel):
    """A vLLM deployment with speculative decoding whose draft length the operator tunes from live metrics."""

    api_version: ApiVersion = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["SpeculativeInference"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculativeInferenceSpec
    status: SpeculativeInferenceStatus | None = None


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
    """Set when the engine is retuned in place (api/live.py): vLLM runs specinfer's scheduler class."""
