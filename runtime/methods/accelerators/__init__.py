"""Accelerator families: one module each, registering itself; importing this package registers them all.

An accelerator carries everything that follows from the hardware: its Kubernetes device resource, the
engine release its image runs, the model runner vLLM picks there, any cap on K, how the tensor
parallel size follows `count`, how preflight counts its devices, what method `none` (plain decoding)
rests on there, and the defaults of the operator's pod profile. The API's enum,
the operator's hardware profiles, `specinfer render --accelerator` and the K caps at admission
are all derived from this registry.
"""

import importlib

from specinfer.runtime.methods.accelerators.model import (
    EVIDENCE_MEANING,
    Accelerator,
    AcceleratorSupport,
    Evidence,
    ModelRunner,
    NoDeviceCount,
    PodDefaults,
    RefusedValue,
    TorchDevices,
)
from specinfer.runtime.methods.accelerators.registry import (
    ACCELERATORS,
    UnknownAcceleratorError,
    accelerator_problems,
    get_accelerator,
    plain_decoding_cells,
    register_accelerator,
)

# One module per family; importing it registers it. This order is the order of the CRD's enum
# (an import list would be re-sorted by the linter).
MODULES = ("nvidia", "amd", "ascend", "cpu")
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "ACCELERATORS", "EVIDENCE_MEANING", "MODULES", "Accelerator", "AcceleratorSupport", "Evidence", "ModelRunner",
    "NoDeviceCount", "PodDefaults", "RefusedValue", "TorchDevices", "UnknownAcceleratorError", "accelerator_problems",
    "get_accelerator", "plain_decoding_cells", "register_accelerator",
]
