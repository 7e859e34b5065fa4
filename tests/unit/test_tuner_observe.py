"""Query answers -> observations: the pure half of the tuning loop (operator/tuner/{queries,observe}.py)."""

from __future__ import annotations

import math

import pytest

from specinfer.operator.tuner.policy import AppliedConfig, DraftConfig, StepSample, TuningInput, decide
from specinfer.operator.tuner.policy.observation import observation_problems
from specinfer.operator.tuner.pure.observe import Target, index_results, observe
from specinfer.operator.tuner.pure.queries import BATCH_QUANTILES, LabelMapping, build_queries

pytestmark = pytest.mark.unit

LABELS = LabelMapping()
NOW = 1_800_000_000.0
WINDOW = 60.0


def sample(ns: str, name: str, value: float, **labels: str) -> dict:
    return {"metric": {"namespace": ns, "specinfer_io_name": name, **labels}, "value": [NOW, repr(value)]}


def vllm_answers(ns: str, name: str, *, k: int = 3, prefix=(0.8, 0.6, 0.45), drafts: float = 5000.0,
                 running: float = 4.0) -> dict[str, list[dict]]:
    """What Prometheus answers for one engine with only vLLM's series (exact, noise-free)."""
    request_steps = drafts
    step = 0.008
    return {
        "scrapeTime": [sample(ns, name, NOW - 1)],
        "drafts": [sample(ns, name, drafts)],
        "draftTokens": [sample(ns, name, drafts * k)],
        "acceptedPerPosition": [sample(ns, name, drafts * p, position=str(i)) for i, p in enumerate(prefix[:k])],
        "requestSteps": [sample(ns, name, request_steps)],
        "requestStepSeconds": [sample(ns, name, request_steps * step)],
        "generatedTokens": [sample(ns, name, request_steps * (1 + sum(prefix[:k])))],
        "batchQuantiles": [sample(ns, name, running, pod=f"{name}-0", quantile=str(q)) for q in BATCH_QUANTILES],
        "perTokenP99": [sample(ns, name, 0.01)],
        "ttftP99": [sample(ns, name, float("nan"))],
    }


def merge(*answers: dict) -> dict:
    out: dict[str, list] = {}
    for answer in answers:
        for key, vector in answer.items():
            out.setdefault(key, []).extend(vector)
    return out


def target(name: str, *, k: int = 3, since: float = NOW - 3600, rollout: bool = False) -> Target:
    return Target("ns", name, AppliedConfig("eagle3", DraftConfig(num_speculative_tokens=k), since), rollout)


def test_every_query_groups_by_the_configured_labels_and_does_not_depend_on_resources():
    mapping = LabelMapping(namespace="kubernetes_namespace", resource="app_instance")
    queries = build_queries(mapping, 90)
    assert len({q.name for q in queries}) == len(queries)
    for query in queries:
        if query.name == "batchQuantiles":  # per pod: quantile_over_time keeps every label
            assert query.promql.count("quantile_over_time") == len(BATCH_QUANTILES)
            continue
        assert "kubernetes_namespace, app_instance" in query.promql, query.promql
        assert "specinfer_io_name" not in query.promql
    # rates over the window; the scrape time and what the engines run now are instants
    instants = {"scrapeTime", "liveSchedulePods", "liveScheduleSince", "liveScheduleErrors"}
    assert all("[90s]" in q.promql for q in queries if q.name not in instants)
    assert all("[" not in q.promql for q in queries if q.name in instants - {"scrapeTime"})


def test_observation_from_vllm_series_is_valid_and_recovers_acceptance():
    answers = merge(vllm_answers("ns", "a"), vllm_answers("ns", "b", k=3, running=40))
    indexed = index_results(answers, LABELS)
    result = observe(target("a"), indexed[("ns", "a")], labels=LABELS, now=NOW, window_seconds=WINDOW)
    assert result.missing is None and result.signals == "vllm"
    obs = result.observation
    assert observation_problems(obs, NOW, 180) == []
    assert obs.accepted_per_position == pytest.approx((4000.0, 3000.0, 2250.0))
    assert obs.drafts_per_position is None and obs.step_samples is None
    assert obs.batch_size_mean == pytest.approx(4.0)
    assert obs.ttft_p99_seconds is None  # NaN from histogram_quantile is "unknown", not a number
    metrics = result.metrics
    assert metrics.per_position_acceptance == [0.8, 0.6, 0.45]
    assert metrics.acceptance_rate == pytest.approx((0.8 + 0.6 + 0.45) / 3, abs=1e-4)
    assert metrics.mean_accepted_length == pytest.approx(2.85)
    assert metrics.tokens_per_second == pytest.approx(5000 * 2.85 / WINDOW, rel=1e-3)
    # per running request: generated tokens over the summed inter-token time (method auto's live speed)
    assert metrics.tokens_per_request_second == pytest.approx(obs.measured_speed, rel=1e-3)
    assert metrics.tokens_per_request_second > 0
    other = observe(target("b"), indexed[("ns", "b")], labels=LABELS, now=NOW, window_seconds=WINDOW)
    assert other.observation.batch_size_mean == pytest.approx(40.0)


def test_plugin_series_give_unbiased_denominators_and_step_samples():
    answers = vllm_answers("ns", "a", k=3)
    drafts_per_pos = [5000.0, 4000.0, 3000.0]  # a schedule drafted fewer positions at large batches
    answers["draftsPerPosition"] = [sample("ns", "a", d, position=str(i)) for i, d in enumerate(drafts_per_pos)]
    answers["stepCount"] = [sample("ns", "a", 1000, batch_size="3", k="3"),
                            sample("ns", "a", 500, batch_size="33-48", k="1")]
    answers["stepSeconds"] = [sample("ns", "a", 8.0, batch_size="3", k="3"),
                              sample("ns", "a", 12.0, batch_size="33-48", k="1")]
    answers["stepRequests"] = [sample("ns", "a", 3000, batch_size="3", k="3"),
                               sample("ns", "a", 20000, batch_size="33-48", k="1")]
    result = observe(target("a"), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    assert result.signals == "specinfer"
    observation = result.observation
    assert observation.drafts_per_position == tuple(drafts_per_pos)
    assert observation.step_samples == (StepSample(batch_size=3.0, k=3, count=1000.0, mean_seconds=0.008),
                                        StepSample(batch_size=40.0, k=1, count=500.0, mean_seconds=0.024))
    # engine-time shares: 8 s at batch 3, 12 s at batch 40
    assert observation.batch_size_distribution == ((3, 0.4), (40, 0.6))
    # position i over its own draft count, not over all drafts (which biases it low under a schedule)
    assert result.metrics.per_position_acceptance == [0.8, 0.75, 0.75]
    assert observation_problems(observation, NOW, 180) == []


def test_with_the_plugins_denominators_the_numerators_come_from_the_same_flush():
    """vLLM's accepted counter runs ahead of the plugin's flushed draft counts: with an always-right
    draft a window then shows more accepted than drafted. The plugin's own accepted counts, flushed
    with its draft counts, are used instead."""
    answers = vllm_answers("ns", "a", k=2, prefix=(1.0, 1.0), drafts=1919.0)  # vLLM: every draft accepted
    plugin_drafts = [1742.0, 1742.0]  # the plugin's last flush, ~1 s behind
    answers["draftsPerPosition"] = [sample("ns", "a", d, position=str(i)) for i, d in enumerate(plugin_drafts)]
    answers["pluginAcceptedPerPosition"] = [sample("ns", "a", d, position=str(i)) for i, d in enumerate(plugin_drafts)]
    result = observe(target("a", k=2), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    assert result.observation.accepted_per_position == (1742.0, 1742.0)
    assert observation_problems(result.observation, NOW, 180) == []
    assert result.metrics.per_position_acceptance == [1.0, 1.0]
    # without the plugin's accepted counts the mixed window is refused, as before
    del answers["pluginAcceptedPerPosition"]
    mixed = observe(target("a", k=2), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                    window_seconds=WINDOW)
    assert any("exceeds its drafts" in problem for problem in observation_problems(mixed.observation, NOW, 180))


def test_missing_series_say_which_and_how_to_fix():
    answers = vllm_answers("ns", "a")
    del answers["drafts"]
    result = observe(target("a"), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    assert result.observation is None
    assert "vllm:spec_decode_num_drafts_total" in result.missing and "specinfer_io_name='a'" in result.missing
    nothing = observe(target("zzz"), None, labels=LABELS, now=NOW, window_seconds=WINDOW)
    assert nothing.observation is None and "vllm:num_requests_running" in nothing.missing


def test_nan_series_are_reported_as_nan_not_as_missing():
    answers = vllm_answers("ns", "a")
    answers["drafts"] = [sample("ns", "a", float("nan"))]  # rate() over a window with too few samples
    result = observe(target("a"), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    assert result.observation is None
    assert "vllm:spec_decode_num_drafts_total is NaN" in result.missing and "has no series" not in result.missing


def test_k_zero_needs_no_speculation_series():
    answers = vllm_answers("ns", "a")
    for key in ("drafts", "draftTokens", "acceptedPerPosition"):
        del answers[key]
    result = observe(target("a", k=0), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    assert (result.observation.drafts, result.observation.accepted_per_position) == (0.0, ())
    assert result.metrics.acceptance_rate is None


def test_idle_quantiles_are_dropped_from_the_distribution():
    answers = vllm_answers("ns", "a")
    answers["batchQuantiles"] = [sample("ns", "a", v, pod="p", quantile=str(q))
                                 for q, v in zip(BATCH_QUANTILES, (0, 0, 2, 2, 6), strict=True)]
    result = observe(target("a"), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    assert result.observation.batch_size_distribution == ((2, pytest.approx(2 / 3, abs=1e-5)),
                                                          (6, pytest.approx(1 / 3, abs=1e-5)))
    assert math.isclose(result.observation.batch_size_mean, 10 / 3, rel_tol=1e-4)


def test_the_policy_accepts_the_built_observation():
    answers = vllm_answers("ns", "a", drafts=20000)
    result = observe(target("a"), index_results(answers, LABELS)[("ns", "a")], labels=LABELS, now=NOW,
                     window_seconds=WINDOW)
    decision, state = decide(result.observation, TuningInput(method="eagle3", max_batch_size=64), None, NOW)
    assert decision.guard not in ("invalidData", "staleData"), decision.reason
    assert state.acceptance is not None  # it learnt from the observation
