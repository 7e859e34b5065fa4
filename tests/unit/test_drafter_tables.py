"""The tables the hand-set drafters are built from (src/specinfer/dev/cpu_engine/drafters.py): pure
counting, so checked here; that vLLM drafts what they predict is measured on the engine
(docs/development.md, "Seed-method drafters")."""

from __future__ import annotations

import pytest

from specinfer.dev.cpu_engine.drafters import accuracy, by_frequency, followers, log_scores, predict

pytestmark = pytest.mark.unit

# After 1 comes 2 or 3; which one is decided by the token before the 1.
PATHS = [[5, 1, 2, 5, 1, 2, 5, 1, 2], [6, 1, 3, 6, 1, 3]]


def test_followers_count_what_came_next_at_each_lag():
    assert followers(PATHS)[1] == {2: 3, 3: 2}
    assert followers(PATHS, lag=1)[5] == {2: 3}  # two tokens after a 5 comes a 2
    assert followers(PATHS, lag=1)[6] == {3: 2}


def test_one_token_cannot_tell_what_two_tokens_can():
    vocabulary = by_frequency(PATHS)
    one = [log_scores(PATHS, 0, vocabulary)]
    two = [log_scores(PATHS, 0, vocabulary), log_scores(PATHS, 1, vocabulary)]
    assert predict(one, [1]) == 2  # the more frequent follower of 1, whatever came before
    assert predict(two, [1, 6]) == 3 and predict(two, [1, 5]) == 2
    assert accuracy(two, PATHS) == 1.0
    assert accuracy(one, PATHS) < 1.0


def test_scores_are_positive_and_a_token_never_seen_drafts_nothing():
    for row in log_scores(PATHS, 0, by_frequency(PATHS)).values():
        assert min(row.values()) == 1.0
    assert predict([log_scores(PATHS, 0, by_frequency(PATHS))], [99]) is None  # a token the table never saw


def test_frequency_order_is_deterministic():
    assert by_frequency(PATHS) == [1, 2, 5, 3, 6]
