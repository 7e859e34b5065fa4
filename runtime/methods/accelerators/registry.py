"""The accelerator registry: one module per family registers itself (see __init__.py)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from specinfer.runtime.methods.accelerators.model import Accelerator

_REGISTRY: dict[str, Accelerator] = {}
# Read-only view, filled as the modules register (in the order of the CRD enum).
ACCELERATORS: Mapping[str, Accelerator] = MappingProxyType(_REGISTRY)


class UnknownAcceleratorError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def register_accelerator(accelerator: Accelerator) -> Accelerator:
    if accelerator.name in _REGISTRY:
        raise ValueError(f"accelerator {accelerator.name!r} is already registered")
    _REGISTRY[accelerator.name] = accelerator
    return accelerator


def get_accelerator(name: str) -> Accelerator:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownAcceleratorError(f"unknown accelerator {name!r}; known: {', '.join(_REGISTRY)}") from None

