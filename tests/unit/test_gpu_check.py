"""`make gpu-check` (src/specinfer/dev/gpu_check.py): its checks judge vLLM's counters right, and it refuses
clearly where no GPU is. The run itself needs a GPU; these are the parts that do not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specinfer.dev import gpu_check
from specinfer.dev.gpu_check import CheckFailed, Counters, check_follows, counters_from, startup_schedule

pytestmark = pytest.mark.unit


def metrics(drafts: float, tokens: float, per_position: list[float]) -> list[SimpleNamespace]:
    return [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=drafts),
            SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=tokens),
            SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=per_position),
            SimpleNamespace(name="vllm:num_requests_running", value=3.0)]


def test_the_counters_of_a_window_are_the_difference_of_two_snapshots():
    before = counters_from(metrics(10, 40, [8, 6, 4, 2]))
    after = counters_from(metrics(30, 60, [25, 6, 4, 2]))
    window = after.since(before)
    assert window == Counters(20, 20, (17, 0, 0, 0)) and window.mean_draft_length == 1.0
    check_follows(window, 1)


@pytest.mark.parametrize(("window", "k", "complaint"), [
    (Counters(0, 0, ()), 1, "no drafts counted"),
    (Counters(10, 40, (9, 3, 0, 0)), 1, "drafts are 4.00 long"),
    (Counters(10, 10, (9, 2, 0, 0)), 1, "accepted at positions >= 1"),
    (Counters(10, 40, (9, 0, 0, 0)), 4, "nothing accepted beyond position 0"),
])
def test_a_window_that_does_not_follow_its_k_fails_naming_it(window, k, complaint):
    with pytest.raises(CheckFailed, match=complaint):
        check_follows(window, k)


def test_it_starts_the_engine_as_the_operator_starts_an_in_place_v2_engine():
    schedule = startup_schedule()
    assert {k for _, _, k in schedule} == set(range(gpu_check.MAX_K + 1))
    assert schedule[0] == [1, 1, gpu_check.MAX_K]


def test_without_a_gpu_it_says_so_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "gpu_problem", lambda: "no GPU visible (torch.cuda.is_available() is False)")
    assert gpu_check.main([]) == 2
    assert "cannot run here: no GPU visible" in capsys.readouterr().err
