"""Accelerator families the catalogue knows, and per-method support entries.

Only facts that change which speculative configuration can serve live here (device
resource, draft-length cap, engine pins). Images, probes and volumes are the
operator's hardware profiles (issue 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Accelerator:
    name: str
    device_resource: str | None   # Kubernetes extended resource, None for CPU
    max_k: int                    # largest num_speculative_tokens the platform serves
    note: str


# vllm-ascend serves at most 16 tokens per verification step, i.e. K + 1 <= 16.
ASCEND_MAX_K = 15
# No platform cap: the method's own k_max applies.
UNCAPPED = 1 << 10

ACCELERATORS: Mapping[str, Accelerator] = MappingProxyType({
    "nvidia": Accelerator("nvidia", "nvidia.com/gpu", UNCAPPED, "CUDA; every method"),
    "amd": Accelerator("amd", "amd.com/gpu", UNCAPPED, "ROCm; attention-backend pins for some methods"),
    "ascend": Accelerator("ascend", "huawei.com/Ascend910", ASCEND_MAX_K, "vllm-ascend; K + 1 <= 16"),
    "cpu": Accelerator("cpu", None, UNCAPPED, "slow; fine for n-gram, suffix and tiny models"),
})


def max_k_on(accelerator: str) -> int:
    return ACCELERATORS[accelerator].max_k


@dataclass(frozen=True)
class AcceleratorSupport:
    """How one method runs on one accelerator: caveats, and pins the operator must apply."""

    caveats: tuple[str, ...] = ()
    # vLLM engine arguments added to `vllm serve` (e.g. an attention-backend pin)
    engine_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"caveats": list(self.caveats), "engine_args": list(self.engine_args), "env": dict(self.env)}


PLAIN = AcceleratorSupport()


def everywhere(**overrides: AcceleratorSupport) -> dict[str, AcceleratorSupport]:
    """Support on every accelerator, with per-accelerator overrides."""
    unknown = set(overrides) - set(ACCELERATORS)
    if unknown:
        raise ValueError(f"unknown accelerators {sorted(unknown)}")
    return {name: overrides.get(name, PLAIN) for name in ACCELERATORS}
