"""How a measurement drives an engine: the prompts and the closed-loop load of each measured point.

Shared by a SpeculativeInferenceCalibration (`spec.prompts`, `spec.load`) and method auto's
comparisons (`spec.speculation.comparison`).
"""

from __future__ import annotations

from pydantic import Field

from specinfer.api.base import ApiModel, ConfigKey, DnsSubdomain


class ConfigMapKeyRef(ApiModel):
    """A key of a ConfigMap in the calibration's namespace."""

    name: DnsSubdomain
    """ConfigMap name."""
    key: ConfigKey
    """Key holding the prompts."""


class Prompts(ApiModel):
    """Your prompts: one per line, or JSON Lines with a "prompt" string per line (for prompts with newlines)."""

    config_map_ref: ConfigMapKeyRef
    """The ConfigMap key that holds them (at most 1 MiB, as every ConfigMap)."""


class Load(ApiModel):
    """How each (candidate, K, batch size) point is driven: closed loop, batch size = requests in flight."""

    output_tokens: int = Field(default=128, ge=8, le=8192)
    """Tokens generated per request (end-of-sequence ignored, so the batch stays full)."""
    prompt_tokens: int = Field(default=256, ge=1, le=32768)
    """Length in words of the load generator's synthetic prompts; used only without spec.prompts."""
    warmup_seconds: int = Field(default=10, ge=0, le=600)
    """Load before the measurement window opens at each point (fills the batch, warms caches)."""
    duration_seconds: int = Field(default=30, ge=1, le=3600)
    """Length of the measurement window at each point."""
    temperature: float = Field(default=0.0, ge=0, le=2)
    """Sampling temperature of the requests (acceptance depends on it: use what your clients send)."""
