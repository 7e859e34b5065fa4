"""The speculative-decoding method catalogue, pinned to vLLM 0.33.0.

    get_method("eagle3").speculative_config(spec.speculation, "nvidia")
    all_methods()  # every MethodSpec, in spec-enum order

`schedule` holds the Dynamic SD schedule semantics shared with the simulator and tuner.
"""

from specinfer.runtime.methods.accelerators import ACCELERATORS, Accelerator, AcceleratorSupport
from specinfer.runtime.methods.registry import (
    MethodSpec,
    UnknownMethodError,
    all_methods,
    get_method,
    register,
)
from specinfer.runtime.methods import catalogue as _catalogue  # noqa: F401  (registers every method)

METHOD_NAMES: tuple[str, ...] = tuple(method.name for method in all_methods())

__all__ = [
    "ACCELERATORS",
    "Accelerator",
    "AcceleratorSupport",
    "METHOD_NAMES",
    "MethodSpec",
    "UnknownMethodError",
    "all_methods",
    "get_method",
    "register",
]
