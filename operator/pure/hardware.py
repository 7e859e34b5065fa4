"""Hardware profiles: what a pod needs to run vLLM on one accelerator family.

The defaults come from the catalogue's accelerators (runtime/methods/accelerators/: device
resource, engine release, image flavour, product label, tolerations, shared memory, startup
time, environment); this module turns them into the profile the renderer places and starts
pods with. The operator configuration (operator/pure/config.py, filled by the Helm chart) may
override any field.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from specinfer import __version__
from specinfer.runtime.methods import ACCELERATORS, Accelerator

IMAGE_REPOSITORY = "ghcr.io/specinfer/runtime"
MODEL_CACHE_PATH = "/models"


class HardwareProfile(BaseModel):
    """Pod-level facts for one accelerator family (frozen; overrides produce a copy)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    image: str
    """Runtime image: the pinned vLLM build for the platform plus the `specinfer runtime` entrypoint."""
    device_resource: str | None
    """Extended resource requested per device (None: CPU, no device)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Platform environment for every method (method-specific pins come from the catalogue)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels every pod of this family needs."""
    product_label: str | None = None
    """Node label that spec.hardware.product is matched against (e.g. nvidia.com/gpu.product)."""
    tolerations: list[dict[str, object]] = Field(default_factory=list)
    """Tolerations for the taints device nodes usually carry."""
    shm_size: str
    """/dev/shm size (memory-backed emptyDir): tensor-parallel workers exchange tensors through it."""
    startup_seconds: int = Field(ge=60)
    """How long the startup probe waits for the model to load before the pod is restarted."""
    model_cache_size: str | None
    """sizeLimit of the model cache emptyDir (None: unlimited, which lets one pod fill the node's disk);
    the operator config can mount a PVC instead."""
    read_only_root_filesystem: bool
    """The engine container's root filesystem is read-only; vLLM writes to HOME, /tmp, /dev/shm and the model
    cache, which are emptyDirs (issue 15). Off where the platform stack's run-time writes are unverified."""


def runtime_image(accelerator: Accelerator) -> str:
    """The runtime image for an accelerator: its engine release's vLLM build plus `specinfer runtime`."""
    return f"{IMAGE_REPOSITORY}:{__version__}-vllm{accelerator.engine.version}-{accelerator.pod.image_flavour}"


def default_profile(accelerator: Accelerator) -> HardwareProfile:
    """The catalogue's pod defaults for an accelerator (runtime/methods/accelerators/), as a profile."""
    pod = accelerator.pod
    return HardwareProfile(
        image=runtime_image(accelerator),
        device_resource=accelerator.device_resource,
        env=dict(pod.env),
        product_label=pod.product_label,
        tolerations=[dict(toleration) for toleration in pod.tolerations],
        shm_size=pod.shm_size,
        startup_seconds=pod.startup_seconds,
        model_cache_size=pod.model_cache_size,
        read_only_root_filesystem=pod.read_only_root_filesystem,
    )


DEFAULT_PROFILES: dict[str, HardwareProfile] = {name: default_profile(a) for name, a in ACCELERATORS.items()}
