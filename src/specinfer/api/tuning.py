"""`spec.tuning`: whether and how the operator tunes the draft length from Prometheus metrics."""

from __future__ import annotations

import re
from typing import Literal, TypeAlias

from pydantic import Field

from specinfer.api.base import ApiModel, Rule, Url, no_server_default
from specinfer.api.workload import SecretKeyRef

# Default mode: observe. The tuner then computes and shows its recommendation in
# status.tuning but never restarts pods on its own: every applied change is a rolling
# restart with a model reload, which an operator should opt into ("auto"), while
# "off" would hide the very insight the product exists for.
TuningMode: TypeAlias = Literal["off", "observe", "auto"]
DEFAULT_TUNING_MODE: TuningMode = "observe"
# scheme://user[:password]@host: userinfo before the first '/', '?' or '#'
URL_WITH_CREDENTIALS = "^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*@"


class Slo(ApiModel):
    """Latency objectives the tuner must keep; it prefers the fastest configuration that meets them."""

    p99_time_per_output_token_seconds: float | None = Field(default=None, gt=0, le=60)
    """p99 of vllm:request_time_per_output_token_seconds (per-token decode time)."""
    p99_time_to_first_token_seconds: float | None = Field(default=None, gt=0, le=3600)
    """p99 of vllm:time_to_first_token_seconds."""


class PrometheusSource(ApiModel):
    """Where the tuner reads vLLM metrics; unset fields fall back to the operator's configuration."""

    url: Url | None = None
    """Prometheus base URL, e.g. http://prometheus.monitoring:9090."""
    auth_secret_ref: SecretKeyRef | None = None
    """Secret with a bearer token under `key`, or keys `username` and `password` for basic auth. The operator
    reads it only when its configuration allows (prometheus.authSecrets) and the Secret carries the label
    specinfer.io/prometheus-auth=true; the URL must be in the configuration's allowlist."""

    rules = (
        Rule(
            cel=f"!has(self.url) || !self.url.matches('{URL_WITH_CREDENTIALS}')",
            message="spec.tuning.prometheus.url must not carry credentials (user:password@host): they would show "
            "in status, Events and logs; put them in a Secret and name it in spec.tuning.prometheus.authSecretRef",
            check=lambda p: p.url is None or not re.match(URL_WITH_CREDENTIALS, p.url),
            field="url",
        ),
    )


class Tuning(ApiModel):
    """The closed loop: metrics -> decision -> (in auto mode) a new K or schedule rolled out one pod at a time."""

    mode: TuningMode = DEFAULT_TUNING_MODE
    """off: no tuning; observe (default): recommend in status only; auto: apply recommendations."""
    interval_seconds: int = Field(default=30, ge=5, le=3600)
    """Seconds between tuning decisions."""
    paused: bool = Field(default=False, json_schema_extra=no_server_default)  # added after v1alpha1's release
    """Stop deciding and writing, keeping what was applied in force (no restart either way): for an
    incident or a measurement by hand. The status keeps the last decision; unpausing resumes from it."""
    slo: Slo | None = None
    """Latency objectives (optional)."""
    min_num_speculative_tokens: int | None = Field(default=None, ge=0, le=64)
    """Smallest K the tuner may choose (0 allows switching drafting off at some batch sizes)."""
    max_num_speculative_tokens: int | None = Field(default=None, ge=0, le=64)
    """Largest K the tuner may choose; default: the method's maximum (capped for the accelerator)."""
    max_restarts_per_hour: int = Field(default=2, ge=0, le=60)
    """Rollouts the tuner may trigger per hour (each reloads the model). 0: in place only -- a change that needs a
    rollout is held and recommended, and status.tuning.lastDecision says so."""
    min_samples: int = Field(default=1000, ge=1, le=10**9)
    """Draft steps (vllm:spec_decode_num_drafts) that must be observed since the last change before deciding."""
    prometheus: PrometheusSource | None = None
    """Prometheus to read from."""

    rules = (
        Rule(
            cel="!has(self.minNumSpeculativeTokens) || !has(self.maxNumSpeculativeTokens) || "
            "self.minNumSpeculativeTokens <= self.maxNumSpeculativeTokens",
            message="spec.tuning.minNumSpeculativeTokens must be <= spec.tuning.maxNumSpeculativeTokens: "
            "lower the minimum or raise the maximum",
            check=lambda t: t.min_num_speculative_tokens is None
            or t.max_num_speculative_tokens is None
            or t.min_num_speculative_tokens <= t.max_num_speculative_tokens,
            field="minNumSpeculativeTokens",
        ),
    )
