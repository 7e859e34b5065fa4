"""The exact `vllm serve` command line (and environment pins) for an effective spec. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from specinfer.api import SpeculativeInferenceSpec, speculation_of
from specinfer.api.workload import DRAIN_SECONDS
from specinfer.runtime.contract.live_schedule import SCHEDULER_CLASS

ENGINE_HOST = "0.0.0.0"  # the pod's Service and Prometheus reach vLLM from outside the container


def tensor_parallel_size(spec: SpeculativeInferenceSpec) -> int:
    """The accelerator's rule (runtime/methods/accelerators/), the same one validation uses."""
    return spec.hardware.tensor_parallel()


def served_model_name(spec: SpeculativeInferenceSpec) -> str:
    return spec.model.served_model_name or spec.model.name


def speculative_config_json(config: Mapping[str, Any] | None) -> str | None:
    """Compact, key-sorted JSON so the same config always renders the same argv (and config hash)."""
    if config is None:
        return None
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def vllm_argv(spec: SpeculativeInferenceSpec, *, live_schedule: bool = False) -> list[str]:
    """`vllm serve MODEL ...`: typed fields first, catalogue pins, then the user's extraArgs.

    `live_schedule`: the engine is retuned in place, so vLLM runs specinfer's scheduler class (the
    operator owns --scheduler-cls: extraArgs may not set it)."""
    effective = speculation_of(spec)
    argv = ["vllm", "serve", spec.model.name,
            "--host", ENGINE_HOST,
            "--port", str(spec.runtime.port),
            "--served-model-name", served_model_name(spec),
            "--tensor-parallel-size", str(tensor_parallel_size(spec))]
    if spec.model.revision:
        argv += ["--revision", spec.model.revision]
    config = speculative_config_json(effective.speculative_config)
    if config is not None:
        argv += ["--speculative-config", config]
    if live_schedule:
        argv += ["--scheduler-cls", SCHEDULER_CLASS]
    # drain in-flight requests on SIGTERM (vLLM's default aborts them); the pod's grace period covers it
    argv += ["--shutdown-timeout", str(DRAIN_SECONDS)]
    argv += list(effective.engine_args)
    argv += list(spec.runtime.extra_args or [])
    return argv


def engine_env(spec: SpeculativeInferenceSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The process environment plus the catalogue's pins for this method on this accelerator.

    A variable the pod already sets wins (an explicit spec.runtime.env is a deliberate choice).
    """
    env = dict(environ)
    for name, value in speculation_of(spec).env.items():
        env.setdefault(name, value)
    return env
