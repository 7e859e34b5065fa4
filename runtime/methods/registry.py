"""The method catalogue: one `MethodSpec` per speculative-decoding method, registered by name.

Follows the registry pattern of vLLM's ReasoningParserManager: each method lives in its
own module and registers itself; a duplicate name is a programming error; an unknown
name is answered with the list of known ones, so a typo in a resource explains itself.
The CRD's CEL rules, `parse_spec`, the operator's rendering and `specinfer methods` all
read this one table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from specinfer.runtime.methods.accelerators import ACCELERATORS, AcceleratorSupport, max_k_on

if TYPE_CHECKING:  # the API models import this module; avoid the cycle at runtime
    from specinfer.api.spec import Speculation

DraftingStyle = Literal["sequential", "parallel", "none"]
DraftModelRule = Literal["required", "optional", "forbidden"]


class UnknownMethodError(KeyError):
    """A method name the catalogue does not know."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass(frozen=True)
class MethodSpec:
    """What the project knows about one method, pinned to vLLM 0.33.0."""

    name: str                         # spec name, e.g. "draftModel"
    vllm_method: str | None           # SpeculativeConfig.method, None for "none"
    draft_model: DraftModelRule       # whether speculation.draftModel is required/optional/forbidden
    drafting: DraftingStyle           # how draft cost grows with K
    k_min: int
    k_max: int
    k_default: int
    summary: str
    accelerators: Mapping[str, AcceleratorSupport] = field(default_factory=dict)
    # extra SpeculativeConfig keys this method always sets (e.g. defaults we pin)
    fixed_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def needs_draft_model(self) -> bool:
        return self.draft_model == "required"

    @property
    def accepts_draft_model(self) -> bool:
        return self.draft_model != "forbidden"

    def supports(self, accelerator: str) -> bool:
        return accelerator in self.accelerators

    def k_max_on(self, accelerator: str) -> int:
        """Largest K this method may use on `accelerator` (Ascend caps K+1 at 16)."""
        return min(self.k_max, max_k_on(accelerator))

    def default_k(self, accelerator: str) -> int:
        return min(self.k_default, self.k_max_on(accelerator))

    def speculative_config(self, speculation: Speculation, accelerator: str) -> dict[str, Any] | None:
        """The exact JSON object for vLLM's `--speculative-config` (None: run without speculation).

        K defaults to the catalogue default (capped for the accelerator). An effective K of 0
        also yields None: vLLM requires num_speculative_tokens > 0, so "off" means no config.
        """
        from specinfer.runtime.methods.config_builder import build_speculative_config

        return build_speculative_config(self, speculation, accelerator)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of `specinfer methods --json`."""
        return {
            "name": self.name,
            "vllm_method": self.vllm_method,
            "needs_draft_model": self.needs_draft_model,
            "draft_model": self.draft_model,
            "drafting": self.drafting,
            "k_min": self.k_min,
            "k_max": self.k_max,
            "k_default": self.k_default,
            "summary": self.summary,
            "accelerators": {name: support.to_dict() for name, support in self.accelerators.items()},
        }


_REGISTRY: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method to the catalogue; a second method with the same name is refused."""
    if spec.name in _REGISTRY:
        raise ValueError(f"method {spec.name!r} is already registered")
    unknown = set(spec.accelerators) - set(ACCELERATORS)
    if unknown:
        raise ValueError(f"method {spec.name!r} names unknown accelerators {sorted(unknown)}; known: {list(ACCELERATORS)}")
    if not spec.k_min <= spec.k_default <= spec.k_max:
        raise ValueError(f"method {spec.name!r}: k_default {spec.k_default} outside [{spec.k_min}, {spec.k_max}]")
    _REGISTRY[spec.name] = spec
    return spec


def get_method(name: str) -> MethodSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMethodError(
            f"unknown speculative-decoding method {name!r}; known methods: {', '.join(_REGISTRY)}"
        ) from None


def all_methods() -> list[MethodSpec]:
    """Every registered method, in registration order (the order of the spec enum)."""
    return list(_REGISTRY.values())
