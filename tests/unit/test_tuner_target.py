"""How the loop reads a resource (operator/tuner/pure/target.py) and talks to Prometheus (prometheus.py)."""

from __future__ import annotations

import base64

import pytest
from prometheus_api_client.exceptions import PrometheusApiClientException

from specinfer.api.timestamps import parse_rfc3339, rfc3339
from specinfer.operator.tuner import prometheus as prom
from specinfer.operator.tuner.policy import DraftConfig
from specinfer.operator.tuner.pure.queries import Query
from specinfer.operator.tuner.pure.settings import PolicyDefaults
from specinfer.operator.tuner.pure.target import (
    TargetError,
    observed_applied,
    read_target,
    rollout_in_progress,
    tuning_input,
)
from specinfer.runtime.sim.model import cost_model
from tests.unit.test_tuner_loop import NOW, resource

pytestmark = pytest.mark.unit


def test_spec_tuning_maps_onto_the_policy_input():
    body = resource("a")
    body["spec"]["tuning"].update(minNumSpeculativeTokens=2, maxNumSpeculativeTokens=5, minSamples=300,
                                  slo={"p99TimePerOutputTokenSeconds": 0.05})
    defaults = PolicyDefaults.model_validate({"cooldownSeconds": 20, "kMax": 99})
    data = tuning_input(read_target(body).spec, defaults)
    assert (data.k_min, data.k_max, data.allow_disable) == (2, 5, False)  # the spec's bounds win
    assert data.min_drafts == 300 and data.slo.per_token_p99_seconds == 0.05
    assert data.cooldown_seconds == 20 and data.max_batch_size == 256
    preset = cost_model(read_target(body).spec.runtime.simulator.cost_model)
    assert data.cost_prior.floor == preset.floor_s != PolicyDefaults().cost_prior.floor  # the simulated hardware's
    assert data.allowed_ks() == [2, 3, 4, 5]
    body["spec"]["tuning"].pop("minNumSpeculativeTokens")
    assert tuning_input(read_target(body).spec).allow_disable is True


def test_downtime_fraction_follows_the_update_strategy():
    body = resource("a")
    surge = tuning_input(read_target(body).spec)
    assert surge.downtime_fraction == 0.0  # no capacity lost: payback asks for nothing beyond minGain
    body["spec"]["updateStrategy"] = "Replace"
    replace = tuning_input(read_target(body).spec)
    assert replace.downtime_fraction == 1.0  # restartSeconds of full capacity, whatever the replica count
    # an operator-wide value (tuning.policy) still wins, as it did before the field existed
    defaults = PolicyDefaults.model_validate({"downtimeFraction": 0.25})
    assert tuning_input(read_target(body).spec, defaults).downtime_fraction == 0.25


def test_method_none_cannot_be_tuned():
    body = resource("a", mode="observe")
    body["spec"]["speculation"] = {"method": "none"}
    with pytest.raises(TargetError, match="no draft length"):
        tuning_input(read_target(body).spec)


def test_applied_config_and_since_come_from_status_and_the_last_rollout():
    body = resource("a")
    target = read_target(body)
    applied = observed_applied(target)
    # retuned in place, before any tuning: the spec's K=3, none above the crossover its prior predicts
    assert (applied.method, applied.config, applied.since) == (
        "eagle3", DraftConfig(num_speculative_tokens=3, schedule=((1, 128, 3), (129, 65536, 0))), NOW - 3600)
    assert not rollout_in_progress(target, applied.config)
    body["status"]["tuning"] = {"applied": {"method": "eagle3", "numSpeculativeTokens": 5, "schedule": [
        {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 5},
        {"minBatchSize": 9, "maxBatchSize": 256, "numSpeculativeTokens": 0},
    ], "since": "2027-01-15T08:30:00Z"}}
    target = read_target(body)
    applied = observed_applied(target)
    assert applied.config == DraftConfig(num_speculative_tokens=5, schedule=((1, 8, 5), (9, 256, 0)))
    assert applied.since == parse_rfc3339("2027-01-15T08:30:00Z")  # later than the rollout's completion
    assert rollout_in_progress(target, applied.config)  # status.effective still shows K=3: not rolled out yet


def test_secret_gives_a_bearer_token_or_basic_auth():
    def encode(**values):
        return {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}

    assert prom.credentials_from_secret(encode(token="abc\n"), "token") == {"bearer_token": "abc"}
    assert prom.credentials_from_secret(encode(username="u", password="p"), "password") == {"basic_auth": ("u", "p")}
    with pytest.raises(prom.SecretError, match="no non-empty key 'token'.*'other'"):
        prom.credentials_from_secret(encode(other="x"), "token")


class Failing:
    def __init__(self, error):
        self.error = error

    def custom_query(self, query, params=None):
        raise self.error


@pytest.mark.parametrize(("error", "reason"), [
    (ConnectionRefusedError(111, "refused"), prom.UNREACHABLE),
    (PrometheusApiClientException("HTTP Status Code 401 (b'unauthorized')"), prom.AUTH_FAILED),
    (PrometheusApiClientException("HTTP Status Code 400 (b'parse error')"), prom.QUERY_FAILED),
])
def test_query_failures_become_typed_reasons(error, reason):
    source = prom.Source("http://prom:9090")
    run = prom.run_queries(source, [Query("a", "up"), Query("b", "up")], at=NOW, client=Failing(error))
    assert run.failure.reason == reason and "http://prom:9090" in run.failure.message
    assert run.queries == 1  # the tick stops at the first failure


def test_a_prometheus_answering_503_is_reported_as_such_not_as_unreachable():
    import http.server
    import threading

    class Unavailable(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = prom.Source(f"http://127.0.0.1:{server.server_port}", timeout_seconds=5)
        run = prom.run_queries(source, [Query("a", "up")], at=NOW)
    finally:
        server.shutdown()
    assert run.failure.reason == prom.QUERY_FAILED
    assert "answered HTTP 503" in run.failure.message and "RetryError" not in run.failure.message


# --- engine truth: what vLLM would drop, refuse or run differently (runtime/methods/engine_truth.py) ---

def _spec(**changes):
    body = resource("a")
    spec = body["spec"]
    spec["runtime"] = {"engine": "vllm"}
    for path, value in changes.items():
        node = spec
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return read_target(body).spec


def test_no_schedule_where_vllm_drops_it():
    assert tuning_input(_spec()).allow_schedule is True  # eagle3 on nvidia: Model Runner V2 keeps it
    suffix = _spec(speculation={"method": "suffix"})
    assert tuning_input(suffix).allow_schedule is False  # V1's suffix drafter takes no per-step K
    data_parallel = _spec(**{"runtime.extraArgs": ["--data-parallel-size", "2"]})
    assert tuning_input(data_parallel).allow_schedule is False  # dropped for every method with DP > 1


def test_the_piecewise_cost_is_priced_where_a_schedule_downgrades_cuda_graphs():
    from specinfer.runtime.methods.engine_truth import PIECEWISE_COST

    p_eagle = _spec(**{"speculation.advanced": {"parallel_drafting": True}})  # V1, full CUDA graphs on nvidia
    factor = tuning_input(p_eagle).schedule_step_factor
    assert factor == pytest.approx(59.6 / 50.0) == PIECEWISE_COST.step_time_factor  # vllm#49548's figure
    assert tuning_input(_spec()).schedule_step_factor == 1.0  # V2: no downgrade
    body = resource("a")  # the simulator has no CUDA graphs
    body["spec"]["speculation"]["advanced"] = {"parallel_drafting": True}
    assert tuning_input(read_target(body).spec).schedule_step_factor == 1.0


def test_k_bounds_follow_what_vllm_accepts_with_the_advanced_settings():
    fly = _spec(**{"speculation.numSpeculativeTokens": 5,
                   "speculation.advanced": {"rejection_sample_method": "fly", "fly_window_size": 3}})
    assert tuning_input(fly).k_min == 4  # FLy: K >= 2 and fly_window_size < K
    synthetic = _spec(**{"speculation.advanced": {"rejection_sample_method": "synthetic",
                                                  "synthetic_acceptance_rates": [0.8, 0.6, 0.4]}})
    data = tuning_input(synthetic)
    assert (data.k_min, data.k_max) == (3, 3)  # one rate per draft position: K is fixed


def test_an_applied_config_the_engine_would_not_run_is_dropped():
    from specinfer.operator.tuner.pure.target import applied_problem

    body = resource("a")
    body["spec"]["speculation"] = {"method": "suffix", "numSpeculativeTokens": 3}
    schedule = [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                {"minBatchSize": 9, "maxBatchSize": 256, "numSpeculativeTokens": 1}]
    body["status"]["tuning"] = {"applied": {"method": "suffix", "numSpeculativeTokens": 4, "since": rfc3339(NOW),
                                            "schedule": schedule}}
    target = read_target(body)
    problem = applied_problem(target, tuning_input(target.spec))
    assert problem is not None and "vllm/config/vllm.py:" in problem  # names the line vLLM follows


def test_a_hold_before_the_policy_ran_keeps_the_restart_count():
    """The new pods' series are missing right after a rollout: the tick holds without consulting the
    policy, and status.tuning.restartsLastHour must still count the rollout it just made."""
    import json

    from specinfer.operator.tuner.policy import PolicyState
    from specinfer.operator.tuner.pure.record import Tick, tick_status

    body = resource("a")
    stored = PolicyState(changes=[NOW - 120.0], last_change_at=NOW - 120.0)
    body["status"]["tuning"] = {"mode": "auto", "policyState": json.dumps(stored.to_json())}
    hold = Tick(mode="auto", now=NOW, degraded=("SeriesMissing", "no series yet"), hold_reason="holding")
    assert tick_status(read_target(body), hold).status.tuning.restarts_last_hour == 1
    later = Tick(mode="auto", now=NOW + 3600, degraded=("SeriesMissing", "no series yet"), hold_reason="holding")
    assert tick_status(read_target(body), later).status.tuning.restarts_last_hour == 0


# --- how the drafter's work follows K (issue 42; runtime/methods/drafters.py) ---

def _draft_model(accelerator: str, running: int | None = None):
    body = resource("a")
    body["spec"]["speculation"] = {"method": "draftModel", "draftModel": {"name": "d"}, "numSpeculativeTokens": 3}
    body["spec"]["hardware"] = {"accelerator": accelerator}
    body["spec"]["tuning"]["maxNumSpeculativeTokens"] = 8
    body["status"]["effective"]["method"] = "draftModel"
    if running is not None:
        body["status"]["effective"]["liveSchedule"] = {"maxNumSpeculativeTokens": running, "digest": "d",
                                                       "configMap": "a-schedule"}
    return read_target(body)


def test_the_cost_prior_drafts_as_the_engines_drafter_does():
    from specinfer.operator.tuner.pure.target import with_engine_envelope

    gpu = tuning_input(_draft_model("nvidia").spec)
    law = gpu.cost_prior
    assert (law.drafted_k, law.zero_step) == ("startup", "startup_k")  # StandaloneARSpeculator, V2
    assert gpu.in_place_max_k == law.startup_k == 3  # its envelope is the K in force, which it pays every step
    cpu = tuning_input(_draft_model("cpu").spec).cost_prior
    assert (cpu.drafted_k, cpu.zero_step, cpu.startup_k) == ("scheduled", "first_pass", None)  # V1 proposer
    assert tuning_input(_spec()).cost_prior.drafted_k == "scheduled"  # EAGLE-3 on V2 follows the step's K
    # the pods run a larger envelope now (a rollout to 6 earlier): that is what every step pays
    target = _draft_model("nvidia", running=6)
    running = with_engine_envelope(tuning_input(target.spec), target)
    assert running.in_place_max_k == running.cost_prior.startup_k == 6


def test_a_calibrated_prior_keeps_the_drafters_law():
    """A measured table replaces the prior's terms (calibrated.py), never how the drafter's work follows K."""
    from specinfer.operator.tuner.pure.target import calibrated_tuning_input

    target = _draft_model("nvidia")
    tuning = tuning_input(target.spec)
    after, _ = calibrated_tuning_input(target, tuning.model_copy(update={"cost_prior": tuning.cost_prior.model_copy(
        update={"drafted_k": "scheduled", "zero_step": "first_pass", "startup_k": None})}))
    assert (after.cost_prior.drafted_k, after.cost_prior.startup_k) == ("startup", 3)


def test_the_specs_own_adaptive_verification_is_the_applied_configs_too():
    """status.tuning.applied leaves adaptiveVerification unset where the tuner kept the spec's setting
    (convert.adaptive_choice): read back, unset is what the spec says, so the loop neither mistakes the config
    in force for another one nor waits forever for a rollout that already happened."""
    body = resource("a")
    body["spec"]["hardware"] = {"accelerator": "nvidia"}
    body["spec"]["runtime"] = {"engine": "vllm"}
    body["spec"]["speculation"]["advanced"] = {"enable_adaptive_verification": True}
    body["status"]["effective"] = {"method": "eagle3", "configHash": "abc", "numSpeculativeTokens": 2,
                                   "adaptiveVerification": True}
    body["status"]["tuning"] = {"applied": {"method": "eagle3", "numSpeculativeTokens": 2,
                                            "since": "2027-01-15T08:30:00Z"}}
    target = read_target(body)
    applied = observed_applied(target)
    assert applied.config == DraftConfig(num_speculative_tokens=2, adaptive_verification=True)
    assert not rollout_in_progress(target, applied.config)
    # the tuner turned it off: the applied config says so, and the pods still verifying adaptively have not rolled
    body["status"]["tuning"]["applied"]["adaptiveVerification"] = False
    target = read_target(body)
    assert observed_applied(target).config == DraftConfig(num_speculative_tokens=2)
    assert rollout_in_progress(target, observed_applied(target).config)
