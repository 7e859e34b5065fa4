"""Contract: adaptive verification is what the catalogue says in vLLM 0.33.0 (runtime/methods/adaptive.py).

Every drafter turns it on, the budget rule is the one `verification_budget` reproduces, and every refusal
admission repeats (src/specinfer/api/adaptive_rules.py) raises at the line cited, with the words quoted,
for a flag `vllm serve` has.
"""

from __future__ import annotations

import ast

import pytest

from specinfer.dev.vllm_wheels import read_source, source_line
from specinfer.runtime.methods import ACCELERATORS
from specinfer.runtime.methods import adaptive as facts
from specinfer.runtime.methods.engines import VLLM_0_33_0
from tests.contract.test_vllm_engine_flags import vllm_flags

pytestmark = pytest.mark.unit

ADAPTIVE = "vllm/v1/worker/gpu/spec_decode/adaptive_verification.py"
LINES = [facts.EVERY_DRAFTER, facts.SURVIVAL, facts.BUDGET, facts.TOP_K, facts.LOCAL_ARGMAX.source,
         *(conflict.source for conflict in facts.CONFLICTS)]


@pytest.mark.parametrize("line", LINES, ids=str)
def test_every_line_the_catalogue_cites_holds_its_text(line):
    assert line.text in source_line(line.path, line.line, VLLM_0_33_0), f"vLLM 0.33.0 {line} moved"


def test_every_drafter_turns_the_estimator_on_and_the_field_still_claims_dspark_only():
    """The base class of every model drafter sets it; the field's docstring has not caught up (vllm#52228)."""
    speculator = read_source("vllm/v1/worker/gpu/spec_decode/speculator.py", VLLM_0_33_0)
    base = speculator[speculator.index("class DraftModelSpeculator(BaseSpeculator):"):]
    assert facts.EVERY_DRAFTER.text in base[:base.index("def load_draft_model")]
    config = read_source("vllm/config/speculative.py", VLLM_0_33_0)
    assert 'confidence. Currently only supported for method="dspark".' in config


def test_the_budget_rule_is_tokens_over_cost_of_the_best_slots():
    function = next(node for node in ast.walk(ast.parse(read_source(ADAPTIVE, VLLM_0_33_0)))
                    if isinstance(node, ast.FunctionDef) and node.name == "get_num_tokens")
    body = ast.unparse(function)
    assert "scores = np.sort(survival_probability[valid])[::-1]" in body
    assert "np.concatenate(([num_sampling_requests], num_sampling_requests + np.cumsum(scores)))" in body
    assert "draft_cost_ms[len(req_ids)] + verify_cost_ms[num_non_draft_tokens_total:" in body


def raised_message(path: str, line: int) -> str:
    """The text of the `raise ValueError(...)` whose call spans `line` (string pieces joined)."""
    for node in ast.walk(ast.parse(read_source(path, VLLM_0_33_0))):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.lineno <= line <= node.end_lineno:
            pieces = [value.value for value in ast.walk(node.exc) if isinstance(value, ast.Constant)
                      and isinstance(value.value, str)]
            return "".join(pieces)
    raise AssertionError(f"vLLM 0.33.0 {path}:{line} raises nothing")


def test_every_refusal_raises_where_cited_with_the_words_quoted_and_names_a_flag_vllm_serve_has():
    for conflict in (*facts.CONFLICTS, facts.LOCAL_ARGMAX):
        assert set(conflict.flags) <= vllm_flags(), conflict.flags
        assert conflict.reason in raised_message(conflict.source.path, conflict.source.line), conflict.setting
    config = read_source("vllm/config/vllm.py", VLLM_0_33_0)
    validate = config[config.index("def _validate_adaptive_verification"):]
    validate = validate[:validate.index("\n    def ")]
    assert "self.lora_config is not None" in validate and "has_full_cudagraphs()" in validate
    assert "pipeline_parallel_size > 1" in validate
    assert "self._validate_adaptive_verification()" in config
    speculative = read_source("vllm/config/speculative.py", VLLM_0_33_0)
    guard = speculative.splitlines()[facts.LOCAL_ARGMAX.source.line - 7:facts.LOCAL_ARGMAX.source.line]
    assert any(f'self.method != "{facts.LOCAL_ARGMAX_EXEMPT[0]}"' in line for line in guard)


def test_model_runner_v1_refuses_it_in_every_release_that_has_it():
    for accelerator in ACCELERATORS.values():
        release = accelerator.engine
        if not release.has_field("enable_adaptive_verification"):
            assert release.v1_refuses_adaptive is None
            continue
        line = release.v1_refuses_adaptive
        assert line is not None
        above = source_line(line.path, line.line - 1, release)
        assert "if self.speculative_config.enable_adaptive_verification:" in above
