"""What `specinfer demo` needs before it starts anything: checked up front, so that a missing piece is one
line naming it and `make setup` (which installs all of them), not a traceback minutes into the run."""

from __future__ import annotations

import shutil
from pathlib import Path

from specinfer.dev.cluster import binaries
from specinfer.dev.cluster.paths import bin_cache_dir
from specinfer.dev.cluster.prometheus import PrometheusServer
from specinfer.dev.cpu_engine.environment import environment_dir, is_installed


def missing_prerequisites(engine: str) -> list[str]:
    """What is missing for the demo on `engine` ("simulator" or "vllm"), each naming where it was looked for."""
    missing = []
    prometheus = PrometheusServer(Path(".")).binary  # the binary the demo would start
    if not Path(prometheus).exists():
        missing.append(f"Prometheus (no `prometheus` on PATH, nor {prometheus})")
    unbuilt = [component.name for component in binaries.CONTROL_PLANE if not binaries.is_built(component)]
    if unbuilt and shutil.which("go") is None:
        missing.append(f"the local control plane ({', '.join(unbuilt)} not built in {bin_cache_dir()}, and "
                       "no Go toolchain on PATH to build them)")
    if engine == "vllm" and not is_installed():
        missing.append(f"the vLLM CPU engine environment ({environment_dir()} is missing)")
    return missing
