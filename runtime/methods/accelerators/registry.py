"""The accelerator registry: one module per family registers itself (see __init__.py).

`register_accelerator` refuses an accelerator that leaves a fact unsaid or contradicts itself, naming
the field, so nothing downstream (preflight's device count, method `none`, the CRD enum) fills the gap
with a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from specinfer.runtime.methods.accelerators.model import Accelerator, AcceleratorSupport, NoDeviceCount, read_from

_REGISTRY: dict[str, Accelerator] = {}
# Read-only view, filled as the modules register (in the order of the CRD enum).
ACCELERATORS: Mapping[str, Accelerator] = MappingProxyType(_REGISTRY)


class UnknownAcceleratorError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def accelerator_problems(accelerator: Accelerator) -> list[str]:
    """Every reason `accelerator` is incomplete or contradicts itself."""
    found = []
    if not accelerator.model_runners:
        found.append("model_runners names no model runner")
    if accelerator.max_k is not None and (accelerator.max_k < 1 or not accelerator.max_k_reason
                                          or accelerator.max_k_source is None):
        found.append("a K cap needs max_k >= 1, the reason for it (max_k_reason) and its line (max_k_source)")
    if accelerator.device_count is None:
        found.append("device_count: say how preflight counts the devices a pod sees -- TorchDevices('<backend>') "
                     "for torch.<backend>.device_count() (plugin= the package that adds the backend), or "
                     "NoDeviceCount('<why not>')")
    elif accelerator.device_resource is None and not isinstance(accelerator.device_count, NoDeviceCount):
        found.append("device_count: an accelerator without a device_resource has no devices to count: "
                     "NoDeviceCount('<why>')")
    if accelerator.plain_decoding is None:
        found.append("plain_decoding: say what method none (plain decoding) rests on here, e.g. "
                     "AcceleratorSupport(read_from(<its engine release>)) -- every accelerator runs it: calibrations "
                     "and method auto measure it as their baseline")
    elif (accelerator.plain_decoding.evidence.kind == "source"
          and accelerator.plain_decoding.evidence != read_from(accelerator.engine)):
        found.append(f"plain_decoding rests on {accelerator.plain_decoding.evidence}, but {accelerator.name} runs "
                     f"{accelerator.engine.label}: read_from({accelerator.engine.label})")
    return found


def register_accelerator(accelerator: Accelerator) -> Accelerator:
    """Add an accelerator; a duplicate or incomplete one is refused, naming what it lacks."""
    if accelerator.name in _REGISTRY:
        raise ValueError(f"accelerator {accelerator.name!r} is already registered")
    problems = accelerator_problems(accelerator)
    if problems:
        raise ValueError(f"accelerator {accelerator.name!r}: " + "; ".join(problems))
    _REGISTRY[accelerator.name] = accelerator
    return accelerator


def get_accelerator(name: str) -> Accelerator:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownAcceleratorError(f"unknown accelerator {name!r}; known: {', '.join(_REGISTRY)}") from None


def plain_decoding_cells() -> dict[str, AcceleratorSupport]:
    """Method none's accelerators: each registered accelerator's own `plain_decoding` cell."""
    return {name: accelerator.plain_decoding for name, accelerator in _REGISTRY.items()
            if accelerator.plain_decoding is not None}
