"""Hardware profiles: what a pod needs to run vLLM on one accelerator family.

The catalogue (`specinfer.runtime.methods`) knows which speculative configs serve on
which accelerator; everything about *placing and starting* the pod lives here: image,
device resource, placement, shared memory, probes, model cache. The operator
configuration (operator/config.py, filled by the Helm chart) may override any field.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from specinfer import VLLM_VERSION, __version__
from specinfer.runtime.methods import ACCELERATORS

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
    shm_size: str = "16Gi"
    """/dev/shm size (memory-backed emptyDir): tensor-parallel workers exchange tensors through it."""
    startup_seconds: int = Field(default=1800, ge=60)
    """How long the startup probe waits for the model to load before the pod is restarted."""
    model_cache_size: str | None = "256Gi"
    """sizeLimit of the model cache emptyDir (None: unlimited, which lets one pod fill the node's disk);
    the operator config can mount a PVC instead."""
    read_only_root_filesystem: bool = True
    """The engine container's root filesystem is read-only; vLLM writes to HOME, /tmp, /dev/shm and the model
    cache, which are emptyDirs (issue 15). Off where the platform stack's run-time writes are unverified."""


def _image(flavour: str) -> str:
    return f"{IMAGE_REPOSITORY}:{__version__}-vllm{VLLM_VERSION}-{flavour}"


def _device_toleration(resource: str) -> dict[str, object]:
    return {"key": resource, "operator": "Exists", "effect": "NoSchedule"}


DEFAULT_PROFILES: dict[str, HardwareProfile] = {
    "nvidia": HardwareProfile(
        image=_image("cuda"),
        device_resource="nvidia.com/gpu",
        product_label="nvidia.com/gpu.product",  # set by NVIDIA GPU feature discovery
        tolerations=[_device_toleration("nvidia.com/gpu")],
    ),
    "amd": HardwareProfile(
        image=_image("rocm"),
        device_resource="amd.com/gpu",
        product_label="amd.com/gpu.product-name",  # set by AMD's node labeller
        tolerations=[_device_toleration("amd.com/gpu")],
        # ROCm's JIT kernel builds (AITER) are not verified to stay off the root filesystem
        read_only_root_filesystem=False,
    ),
    "ascend": HardwareProfile(
        image=_image("ascend"),
        device_resource="huawei.com/Ascend910",
        product_label="accelerator-type",  # Ascend device plugin's node label
        tolerations=[_device_toleration("huawei.com/Ascend910")],
        # HCCL keeps device buffers in shared memory and loads are slower than CUDA's
        shm_size="32Gi",
        startup_seconds=2700,
        # CANN writes kernel_meta/ and logs at run time; not verified to stay off the root filesystem
        read_only_root_filesystem=False,
    ),
    "cpu": HardwareProfile(
        image=_image("cpu"),
        device_resource=None,
        # vLLM's CPU backend sizes its KV cache from this variable (GiB); the default of 4 is tiny
        env={"VLLM_CPU_KVCACHE_SPACE": "8"},
        shm_size="4Gi",
        startup_seconds=900,
        model_cache_size="64Gi",
    ),
}

assert set(DEFAULT_PROFILES) == set(ACCELERATORS), "one hardware profile per catalogue accelerator"
