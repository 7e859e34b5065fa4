"""What the catalogue knows about one accelerator family, and how one method runs on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from specinfer.runtime.methods.engines import EngineRelease, SourceLine

ModelRunner = Literal["v1", "v2"]


def _frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class PodDefaults:
    """Defaults of the operator's hardware profile for this family (operator/pure/hardware.py builds it;
    the operator configuration may override every field)."""

    image_flavour: str                               # runtime image tag suffix: cuda, rocm, ascend, cpu
    product_label: str | None = None                 # node label that spec.hardware.product is matched against
    tolerations: tuple[Mapping[str, str], ...] = ()  # for the taints device nodes usually carry
    shm_size: str = "16Gi"                           # /dev/shm: tensor-parallel workers exchange tensors here
    startup_seconds: int = 1800                      # how long the startup probe waits for the model to load
    env: Mapping[str, str] = field(default_factory=_frozen)  # platform environment for every method
    # sizeLimit of the model-cache emptyDir (None: unlimited, which lets one pod fill the node's disk)
    model_cache_size: str | None = "256Gi"
    # vLLM writes only to HOME, /tmp, /dev/shm and the model cache (emptyDirs); off where the platform
    # stack's run-time writes are unverified
    read_only_root_filesystem: bool = True


def device_taint_toleration(resource: str) -> Mapping[str, str]:
    """Device plugins' nodes are usually tainted with their resource name."""
    return _frozen({"key": resource, "operator": "Exists", "effect": "NoSchedule"})


@dataclass(frozen=True)
class RefusedValue:
    """A `speculation.advanced` value this platform's engine cannot run (refused at admission)."""

    field: str
    value: Any
    reason: str
    source: SourceLine


@dataclass(frozen=True)
class EngineNote:
    """A fact about how this platform's engine runs that the pod defaults or the docs follow, with the
    lines of the release's source it rests on (checked against the wheel by the contract tests);
    no lines: measured here, and `fact` says how."""

    topic: str
    fact: str
    sources: tuple[SourceLine, ...] = ()


@dataclass(frozen=True)
class TorchDevices:
    """Preflight counts the devices a pod sees as `torch.<backend>.device_count()`, importing `plugin`
    first where a separate package adds the backend to torch (runtime/pod/preflight.py)."""

    backend: str               # torch's device module: "cuda" (ROCm builds report AMD GPUs there too), "npu"
    plugin: str | None = None  # e.g. "torch_npu", which registers torch.npu


@dataclass(frozen=True)
class NoDeviceCount:
    """Preflight counts no devices on this platform, and says why."""

    reason: str


@dataclass(frozen=True)
class Accelerator:
    name: str
    summary: str
    device_resource: str | None          # Kubernetes extended resource per device; None: no device (CPU)
    engine: EngineRelease                # the release its runtime image runs
    model_runners: tuple[ModelRunner, ...]  # vLLM model runners the platform can run, its default first
    model_runner_source: SourceLine      # where the engine picks the default (in `engine`'s source)
    full_cuda_graphs: bool               # default cudagraph mode captures FULL graphs (GPU only)
    pod: PodDefaults
    max_k: int | None = None             # platform cap on num_speculative_tokens; None: the method's own bound
    max_k_reason: str = ""
    max_k_source: SourceLine | None = None  # the line that caps K (in `engine`'s source)
    tensor_parallel_from_count: bool = True  # False: tensor parallel size 1 unless set, whatever `count`
    refused_values: tuple[RefusedValue, ...] = ()
    notes: tuple[EngineNote, ...] = ()   # what running the engine here taught us (docs/runtime.md)
    # Said by every accelerator (registration refuses one that does not say; registry.py):
    # how preflight counts the devices a pod sees, before vLLM loads a weight
    device_count: TorchDevices | NoDeviceCount | None = None
    # method `none` here, what that rests on: plain decoding is the baseline every calibration and every
    # comparison of method `auto` measures, so every accelerator runs it (method none's cells are these)
    plain_decoding: AcceleratorSupport | None = None

    @property
    def default_model_runner(self) -> ModelRunner:
        return self.model_runners[0]

    def tensor_parallel_size(self, count: int, requested: int | None) -> int:
        """vLLM's --tensor-parallel-size: the requested one, else the device count (1 where the
        platform does not split a model across `count` devices)."""
        if requested is not None:
            return requested
        return count if self.tensor_parallel_from_count else 1

    def cap_k(self, k: int) -> int:
        return k if self.max_k is None else min(k, self.max_k)


EvidenceKind = Literal["engine", "source", "docs"]
EVIDENCE_MEANING: Mapping[EvidenceKind, str] = MappingProxyType({
    "engine": "ran on the real engine in this repository's tests",
    "source": "read from the pinned wheel's source (tests/contract/ hold it to the wheel)",
    "docs": "the platform's own documentation (not in a wheel the contract tests read)",
})


@dataclass(frozen=True)
class Evidence:
    """What one (method, accelerator) cell of the catalogue rests on, and where to look."""

    kind: EvidenceKind
    where: tuple[str, ...]  # engine: the test files that serve it; source: the release; docs: the pages

    def __post_init__(self) -> None:
        if not self.where:
            raise ValueError(f"{self.kind} evidence must say where")

    def __str__(self) -> str:
        return f"{self.kind}: {', '.join(self.where)}"


def ran_here(*tests: str) -> Evidence:
    """Served by the real engine in these tests (tests/unit/test_method_evidence.py checks they do)."""
    return Evidence("engine", tests)


def read_from(release: EngineRelease) -> Evidence:
    """Read from `release`'s source only (registration checks it is the accelerator's release)."""
    return Evidence("source", (f"{release.label} source",))


def platform_docs(*pages: str) -> Evidence:
    return Evidence("docs", pages)


@dataclass(frozen=True)
class AcceleratorSupport:
    """How one method runs on one accelerator: what that rests on, caveats, and pins the operator must apply."""

    evidence: Evidence
    caveats: tuple[str, ...] = ()
    # vLLM engine arguments added to `vllm serve` (e.g. an attention-backend pin)
    engine_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=_frozen)

    def to_dict(self) -> dict[str, Any]:
        return {"evidence": {"kind": self.evidence.kind, "where": list(self.evidence.where)},
                "caveats": list(self.caveats), "engine_args": list(self.engine_args), "env": dict(self.env)}
