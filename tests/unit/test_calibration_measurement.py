"""Measured points, the engine report's wire format, and the report read as hostile input."""

from __future__ import annotations

import json

import pytest

from specinfer.runtime.contract.calibration.measurement import (
    TERMINATION_MESSAGE_LIMIT,
    EngineReport,
    Measurement,
    ReportError,
    acceptance_rows,
    decode,
    encode,
    unexpected,
)

pytestmark = pytest.mark.unit


def m(batch: int = 4, k: int = 2, **fields) -> Measurement:
    values = {"seconds": 10.0, "steps": 400, "request_steps": 1500, "generated": 4200, "drafts": 1500,
              "accepted": (1200, 900)} if k else {"seconds": 10.0, "steps": 400, "request_steps": 1500,
                                                 "generated": 1500}
    values.update(fields)
    return Measurement(k=k, batch_size=batch, **values)


def test_derived_figures():
    point = m().point()
    assert point.step_seconds == pytest.approx(10 / 400)
    assert point.mean_batch_size == pytest.approx(1500 / 400)
    assert point.tokens_per_second == pytest.approx(420.0)
    assert point.tokens_per_step == pytest.approx(4200 / 1500)


def test_acceptance_pools_batch_sizes_of_one_k():
    rows = acceptance_rows([m(1, drafts=100, accepted=(90, 60)), m(4, drafts=300, accepted=(210, 120)),
                            m(1, k=0)])
    (row,) = rows
    assert row.num_speculative_tokens == 2 and row.drafts == 400
    assert row.per_position == [pytest.approx(300 / 400), pytest.approx(180 / 400)]


def test_round_trip_fits_a_termination_message():
    report = EngineReport(measurements=tuple(m(b) for b in (1, 2, 4, 8, 16, 32, 64, 128)))
    text = encode(report)
    assert len(text.encode()) < TERMINATION_MESSAGE_LIMIT / 2
    assert decode(text) == report


def test_a_report_worst_case_still_fits():
    big = {"seconds": 3599.123456789, "steps": 10**12, "request_steps": 10**12, "generated": 10**12,
           "drafts": 10**12}
    report = EngineReport(measurements=tuple(m(b, k=8, accepted=(10**12,) * 8, **big)
                                             for b in (1, 2, 4, 8, 16, 32, 64, 4096)))
    assert len(encode(report).encode()) <= TERMINATION_MESSAGE_LIMIT


@pytest.mark.parametrize(("text", "complaint"), [
    ("", "not JSON"),
    ("specinfer calibrate: the engine exited", "not JSON"),
    ("x" * (3 * TERMINATION_MESSAGE_LIMIT), "longer than a termination message"),
    ('{"v": 2, "p": []}', "not a version-1"),
    ('{"v": 1, "p": []}', "holds 0 points"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10, 10, 10, 10, [5, 5]]]' + "}", None),
    ('{"v": 1, "p": [[2, 1, "1.0", 10, 10, 10, 10, [5, 5]]]}', "other than numbers"),
    ('{"v": 1, "p": [[2, 1, true, 10, 10, 10, 10, [5, 5]]]}', "other than numbers"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10.5, 10, 10, 10, [5, 5]]]}', "not an integer"),
    ('{"v": 1, "p": [[2, 1, NaN, 10, 10, 10, 10, [5, 5]]]}', "seconds"),
    ('{"v": 1, "p": [[2, 1, Infinity, 10, 10, 10, 10, [5, 5]]]}', "seconds"),
    ('{"v": 1, "p": [[2, 1, -1.0, 10, 10, 10, 10, [5, 5]]]}', "seconds"),
    ('{"v": 1, "p": [[2, 1, 1.0, 0, 10, 10, 10, [5, 5]]]}', "steps"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10, -3, 10, 10, [5, 5]]]}', "request_steps"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10, 10, 10, 10, [5, 11]]]}', "more accepted at a position than drafts"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10, 10, 10, 10, [5, 5, 5]]]}', "accepted positions at K=2"),
    ('{"v": 1, "p": [[0, 1, 1.0, 10, 10, 10, 10, []]]}', "drafts without speculation"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10, 10, 10, 10, [5, 5]], [3, 4, 1.0, 10, 10, 10, 10, [5, 5, 5]]]}',
     "more than one draft length"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10, 10, 10, 10, [5, 5]], [2, 1, 1.0, 10, 10, 10, 10, [5, 5]]]}',
     "a batch size appears twice"),
    ('{"v": 1, "p": [[2, 1, 1.0, 10, 10, 10]]}', "a point is not"),
    ('[' * 5000 + ']' * 5000, "longer than a termination message"),
])
def test_decode_refuses_what_is_not_a_report(text, complaint):
    if complaint is None:
        assert decode(text).k == 2
        return
    with pytest.raises(ReportError) as caught:
        decode(text)
    assert complaint in str(caught.value)
    assert "specinfer calibrate: the engine" not in str(caught.value)  # never echoes the text


def test_too_many_points():
    rows = [[2, b, 1.0, 10, 10, 10, 10, [5, 5]] for b in range(1, 11)]
    with pytest.raises(ReportError, match="holds 10 points"):
        decode(json.dumps({"v": 1, "p": rows}))


def test_unexpected_points():
    report = EngineReport(measurements=(m(1), m(4)))
    assert unexpected(report, 2, [1, 4]) is None
    assert "K=2, the engine was started with K=3" in unexpected(report, 3, [1, 4])
    assert "batch sizes [1, 4], [1, 4, 16] were asked for" in unexpected(report, 2, [1, 4, 16])
