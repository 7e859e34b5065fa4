"""Which local pods run the real vLLM CPU engine, and the environment that models the CPU runtime image.

The runtime image for `hardware.accelerator: cpu` is vLLM's CPU build with specinfer installed; its
entrypoint `specinfer runtime` execs `vllm serve`. Locally the cached engine environment
(specinfer.dev.cpu_engine) plays that image, with this checkout's code on its path (the overlay). Pods for
GPU accelerators cannot be modelled here and keep running in the project's venv, where the
runtime's preflight stops them (no `vllm` on PATH); simulator pods need no engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specinfer.dev.cpu_engine.environment import EngineNotInstalled
from specinfer.dev.vllm_wheels import cache_dir

__all__ = ["THREADS_BIND", "EngineNotInstalled", "cpu_for_next_engine", "cpu_image_env", "runs_cpu_engine"]

THREADS_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def runs_cpu_engine(runtime_config: Mapping) -> bool:
    """True for a RuntimeConfig whose pod execs the real vLLM on CPU."""
    spec = runtime_config.get("spec") or {}
    engine = (spec.get("runtime") or {}).get("engine", "vllm")
    accelerator = (spec.get("hardware") or {}).get("accelerator")
    return engine == "vllm" and accelerator == "cpu"


def compile_cache_dir() -> Path:
    """vLLM's torch.compile cache, shared by local engine pods (a pod's HOME is its own folder):
    a persistent cache volume, in cluster terms. It keys entries by model and config itself."""
    return cache_dir() / "engines" / "vllm-cache"


def cpu_image_env(pod_env: Mapping[str, str]) -> dict[str, str]:
    """The pod's environment inside the modelled CPU image. Raises EngineNotInstalled."""
    from specinfer.dev.cpu_engine.overlay import engine_process_env

    env = engine_process_env(pod_env)
    env.setdefault("VLLM_CACHE_ROOT", str(compile_cache_dir()))
    # the shared cache is of use only without AOT compile, whose artifacts the CPU backend fails to load
    # (runtime/methods/accelerators/cpu.py, COMPILE_CACHE): ~5 s of every start on a quiet machine
    env.setdefault("VLLM_USE_AOT_COMPILE", "0")
    return env


def cpu_for_next_engine(taken: list[int], siblings: list[int], allowed: set[int] | None = None) -> int:
    """The CPU a new engine pod's OpenMP threads get: away from the pods of its own resource (in a
    rollout the new engine warms up while the old one serves), then the one fewest engine pods use.

    vLLM binds its threads to the allowed CPUs less one kept for its other processes
    (VLLM_CPU_OMP_THREADS_BIND=auto): every engine on this machine lands on CPU 0, so during a
    rollout the new engine's warm-up and the old engine's serving shared one core while the other
    idled. A kubelet with the static CPU manager gives each pod cores of its own; the runner gives
    each engine pod one, highest first on a tie (engines started outside the runner take CPU 0).
    `taken`: the CPUs of the engine pods running here; `siblings`: those of the same resource."""
    cpus = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    return min(reversed(cpus), key=lambda cpu: (siblings.count(cpu), taken.count(cpu)))
