"""`specinfer models measure` reads each engine's result from its stdout, where vLLM logs too."""

from __future__ import annotations

import json

import pytest

from specinfer.dev.cpu_engine.acceptance import DEMO_PROMPT_WORDS, PROMPTS, RESULT, held_out_prompts, result_of

pytestmark = pytest.mark.unit

FIGURES = {"method": "eagle3", "drafts": 917, "acceptedPerPosition": [638, 279, 210], "firstPositionAcceptance": 0.696}


def test_the_result_is_found_among_vllms_shutdown_lines():
    stdout = "\n".join([
        "(EngineCore pid=1) INFO 12-04 03:01:04 [core.py:1499] [shutdown] EngineCore: exiting busy loop",
        RESULT + json.dumps(FIGURES),
        "(MainProcess pid=2) WARNING 12-04 03:01:09 [utils.py:648] [shutdown] Process manager: force killing",
    ])
    assert result_of(stdout) == FIGURES


def test_no_result_is_none_not_a_crash():
    assert result_of("(EngineCore pid=1) ERROR ... engine died\n") is None
    assert result_of("") is None
    assert result_of(RESULT + '{"drafts": 9(Worker pid=3) INFO ...') is None  # another process ran into it


def test_a_result_after_partial_output_on_its_line_is_found():
    assert result_of("(Worker pid=3) INFO partial" + RESULT + json.dumps(FIGURES)) == FIGURES


def test_the_prompts_are_the_real_engine_demos():
    prompts = held_out_prompts()
    assert DEMO_PROMPT_WORDS == 16  # the demo's prompts (demo/run.py passes it to its load)
    assert len(prompts) == PROMPTS and len(set(prompts)) == PROMPTS
    words = {"alpha", "beta", "gamma", "delta", "omega"}
    assert all(len(prompt.split()) == DEMO_PROMPT_WORDS and set(prompt.split()) <= words for prompt in prompts)
