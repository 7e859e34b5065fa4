"""The top-level object: the `SpeculativeInference` resource. (What the operator hands a pod, the
`RuntimeConfig`, is the operator-pod contract's: runtime/contract/runtime_config.py.)"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

from pydantic import Field

from specinfer.api.base import ApiModel
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


class SpeculativeInference(ApiModel):
    """A vLLM deployment with speculative decoding whose draft length the operator tunes from live metrics."""

    api_version: ApiVersion = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["SpeculativeInference"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculativeInferenceSpec
    status: SpeculativeInferenceStatus | None = None

