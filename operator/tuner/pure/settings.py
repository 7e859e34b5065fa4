"""Operator-wide settings of the tuning loop (operator configuration, key `tuning`).

    tuning:
      windowSeconds: 120          # rates over this window; the policy waits for one window after a change
      tickSeconds: 5              # the loop wakes this often; each resource decides every spec.tuning.intervalSeconds
      labels: {namespace: namespace, resource: specinfer_io_name}   # match your PodMonitor relabelling
      queryTimeoutSeconds: 10
      maxResponseBytes: 33554432  # a larger answer (a hostile or broken Prometheus) fails the query
      policy: {cooldownSeconds: 600}   # defaults for the policy's tuning input (docs/tuner.md)
      recordFile: /var/log/specinfer/ticks.jsonl   # optional: every decision's input, for `specinfer tuner replay`
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from specinfer.operator.tuner.policy import TuningInput
from specinfer.operator.tuner.pure.queries import LabelMapping


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)


class Labels(_Settings):
    namespace: str = Field(default="namespace", min_length=1)
    """Prometheus label holding the pod's namespace."""
    resource: str = Field(default="specinfer_io_name", min_length=1)
    """Prometheus label holding the SpeculativeInference name (the pod label specinfer.io/name)."""

    def mapping(self) -> LabelMapping:
        return LabelMapping(namespace=self.namespace, resource=self.resource)


class PolicyDefaults(TuningInput):
    """Operator-wide defaults for the policy's tuning input (the keys of docs/tuner.md); what the spec
    decides -- the method, its bounds, the SLOs, the restart budget -- always wins."""

    method: str = "*"


class TunerSettings(_Settings):
    window_seconds: float = Field(default=120.0, ge=5, le=3600)
    tick_seconds: float = Field(default=5.0, gt=0, le=600)
    labels: Labels = Field(default_factory=Labels)
    query_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    max_response_bytes: int = Field(default=32 * 1024 * 1024, ge=64 * 1024, le=1024**3)
    """Largest Prometheus answer read per query (after decompression); larger ones fail the tick for
    the resources that share that Prometheus, with PrometheusQueryFailed."""
    policy: PolicyDefaults = Field(default_factory=PolicyDefaults)
    """Operator-wide defaults for the policy's tuning input; the spec's bounds and SLOs override them."""
    record_file: str | None = Field(default=None, min_length=1)
    """Append every decision with the observation, tuning input and state it was made from (JSON
    lines, operator/tuner/recording.py) to this file: `specinfer tuner replay` decides them again."""
