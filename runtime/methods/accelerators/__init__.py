"""Accelerator families: one module each, registering itself; importing this package registers them all.

An accelerator carries everything that follows from the hardware: its Kubernetes device resource, the
engine release its image runs, the model runner vLLM picks there, any cap on K, how the tensor
parallel size follows `count`, and the defaults of the operator's pod profile. The API's enum,
the operator's hardware profiles, `specinfer render --accelerator` and the K caps at admission
are all derived from this registry.
"""

from specinfer.runtime.methods.accelerators.model import (
    PLAIN,
    Accelerator,
    AcceleratorSupport,
    ModelRunner,
    PodDefaults,
    RefusedValue,
)
from specinfer.runtime.methods.accelerators.registry import (
    ACCELERATORS,
    UnknownAcceleratorError,
    everywhere,
    get_accelerator,
    register_accelerator,
)
from specinfer.runtime.methods.accelerators import nvidia, amd, ascend, cpu  # noqa: F401,E402  (registers, in enum order)

__all__ = [
    "ACCELERATORS", "PLAIN", "Accelerator", "AcceleratorSupport", "ModelRunner", "PodDefaults", "RefusedValue",
    "UnknownAcceleratorError", "everywhere", "get_accelerator", "register_accelerator",
]
