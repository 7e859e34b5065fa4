"""An engine's /metrics text -> the counters of a point; hostile or foreign text is refused."""

from __future__ import annotations

import pytest

from specinfer.runtime.contract.calibration.prompts import PromptsError, parse_prompts, read_prompts
from specinfer.runtime.contract.calibration.scrape import Counters, ScrapeError, parse

pytestmark = pytest.mark.unit

# The shape vLLM 0.33 serves (two data-parallel engines: engine="0" and "1"), cut to what a point reads.
VLLM_TEXT = """\
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="tiny"} 3.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="tiny"} 120.0
vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} 120.0
vllm:iteration_tokens_total_sum{engine="0",model_name="tiny"} 900.0
vllm:iteration_tokens_total_bucket{engine="1",le="+Inf",model_name="tiny"} 80.0
vllm:iteration_tokens_total_count{engine="1",model_name="tiny"} 80.0
vllm:iteration_tokens_total_sum{engine="1",model_name="tiny"} 500.0
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 400.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 9.0
vllm:inter_token_latency_seconds_count{engine="1",model_name="tiny"} 300.0
vllm:inter_token_latency_seconds_sum{engine="1",model_name="tiny"} 7.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 1100.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 850.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 400.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="tiny"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 350.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 250.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="0"} 260.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="1"} 190.0
"""


def test_parse_sums_engines_and_reads_k_from_the_positions():
    counters = parse(VLLM_TEXT)
    assert counters == Counters(steps=200.0, request_steps=700.0, generated=1950.0, drafts=700.0,
                                accepted=(610.0, 440.0))


def test_an_engine_without_speculation_has_no_positions():
    text = "\n".join(line for line in VLLM_TEXT.splitlines() if "spec_decode" not in line) + "\n"
    assert parse(text).accepted == () and parse(text).drafts == 0.0


def test_minus_is_the_window_and_refuses_a_restart():
    before = parse(VLLM_TEXT)
    after = parse(VLLM_TEXT.replace("1100.0", "1300.0").replace(' 120.0', ' 150.0'))
    delta = after.minus(before)
    assert delta.generated == 200.0 and delta.steps == 30.0 and delta.accepted == (0.0, 0.0)
    with pytest.raises(ScrapeError, match="restarted"):
        before.minus(after)
    k3 = Counters(1, 1, 1, 1, accepted=(1.0, 1.0, 1.0))
    with pytest.raises(ScrapeError, match="draft positions changed"):
        k3.minus(before)


@pytest.mark.parametrize(("text", "complaint"), [
    ("# TYPE x counter\nx_total 1\n", "lacks vllm:iteration_tokens_total_count"),
    ("<html>not metrics</html>", "not Prometheus text"),
    (VLLM_TEXT.replace("1100.0", "NaN"), "not a count"),
    (VLLM_TEXT.replace("1100.0", "-5"), "not a count"),
    (VLLM_TEXT.replace('position="1"', 'position="7"'), "skips draft positions"),
    (VLLM_TEXT.replace('position="1"', 'position="999"'), "has position 999"),
])
def test_refused(text, complaint):
    with pytest.raises(ScrapeError) as caught:
        parse(text)
    assert complaint in str(caught.value)


def test_prompts_lines_and_json_lines():
    text = 'write a poem\n\n{"prompt": "two\\nlines"}\n   padded   \n'
    assert parse_prompts(text) == ["write a poem", "two\nlines", "padded"]


@pytest.mark.parametrize(("raw", "complaint"), [
    (b"\n  \n", "no prompt in it"),
    (b"ok\n{not json\n", "line 2 starts with '{' but is not JSON"),
    (b'ok\n{"text": "x"}\n', 'line 2 is a JSON object without a non-empty string "prompt"'),
    (b"\xff\xfe", "not UTF-8"),
    (b"x" * (1024 * 1024 + 1), "more than 1048576 bytes"),
])
def test_prompts_refused_naming_the_line(raw, complaint):
    with pytest.raises(PromptsError) as caught:
        read_prompts(raw)
    assert complaint in str(caught.value)
