"""Cost per million tokens (operator/tuner/pure/pricing.py), its configuration, status.cost and the per-resource
series the tuning loop exports for the dashboard and the alerts (operator/tuner/pure/exports.py, speedup.py)."""

from __future__ import annotations

import pytest

from specinfer.api.status import EffectiveConfig
from specinfer.operator.plumbing import metrics
from specinfer.operator.pure.config import CostConfig, parse_config
from specinfer.operator.pure.errors import ConfigError
from specinfer.operator.tuner.pure.exports import k_in_force
from specinfer.operator.tuner.pure.pricing import (
    cost_per_million_tokens,
    last_change_saving,
    price_per_replica_hour,
    resource_cost,
)
from tests.unit.test_tuner_loop import (  # noqa: F401  (fake_prometheus is a fixture)
    SETTINGS,
    FakeKube,
    TuningLoop,
    apply_back,
    fake_prometheus,
    high_acceptance,
    resource,
    run_tick,
)
from tests.unit.test_tuner_observe import NOW

pytestmark = pytest.mark.unit

PRICES = CostConfig(currency="EUR", accelerators={"nvidia": 2.5, "cpu": 0.4}, products={"NVIDIA-H100-80GB-HBM3": 4.0})


def value(metric: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(metric, labels)


# ---- prices ------------------------------------------------------------------------------------
@pytest.mark.parametrize("accelerator, product, devices, expected", [
    ("nvidia", None, 2, 5.0),                            # family price x devices per replica
    ("nvidia", "NVIDIA-H100-80GB-HBM3", 2, 8.0),         # the product's price wins
    ("nvidia", "NVIDIA-A10G", 1, 2.5),                   # unpriced product: the family's
    ("cpu", None, 8, 0.4),                               # cpu: per replica, hardware.count means nothing
    ("amd", None, 1, None),                              # no price: no cost, no guess
    ("amd", "NVIDIA-H100-80GB-HBM3", 1, 4.0),            # products are matched by name whatever the family
])
def test_price_per_replica_hour(accelerator, product, devices, expected):
    assert price_per_replica_hour(PRICES, accelerator=accelerator, product=product, devices=devices) == expected


def test_cost_per_million_tokens_and_the_last_changes_saving():
    # 2 replicas x 2 devices x 2.5/h = 10/h; 1000 tokens/s = 3.6 M tokens/h -> 10 / 3.6 per million
    cost = resource_cost(PRICES, accelerator="nvidia", product=None, devices=2, replicas=2,
                         tokens_per_second=1000.0, realised_gain=0.25)
    assert cost.currency == "EUR" and cost.price_per_hour == 10.0
    assert cost.per_million_tokens == pytest.approx(2.7778, abs=1e-4)
    # the replaced config needed 1.25x the engine time for the same tokens: 3.4722 per million, 0.6944 more
    assert cost.last_change_saving_per_million_tokens == pytest.approx(0.6944, abs=1e-4)
    dearer = resource_cost(PRICES, accelerator="nvidia", product=None, devices=2, replicas=2,
                           tokens_per_second=1000.0, realised_gain=-0.1)
    assert dearer.last_change_saving_per_million_tokens == pytest.approx(-0.2778, abs=1e-4)
    assert cost.to_status().to_json() == {"currency": "EUR", "pricePerHour": 10.0, "perMillionTokens": 2.777778,
                                          "lastChangeSavingPerMillionTokens": 0.694444}


@pytest.mark.parametrize("tokens", [None, 0, -5, float("nan"), float("inf"), "12", True])
def test_no_tokens_or_hostile_throughput_gives_no_per_token_cost(tokens):
    assert cost_per_million_tokens(10.0, tokens) is None
    cost = resource_cost(PRICES, accelerator="cpu", product=None, devices=1, replicas=3, tokens_per_second=tokens,
                         realised_gain=0.2)
    assert cost.price_per_hour == pytest.approx(1.2) and cost.per_million_tokens is None
    assert cost.last_change_saving_per_million_tokens is None
    assert set(cost.to_status().to_json()) == {"currency", "pricePerHour"}


@pytest.mark.parametrize("gain", [None, float("nan"), -1.0, -3, "0.1"])
def test_no_or_hostile_realised_gain_gives_no_saving(gain):
    assert last_change_saving(2.0, gain) is None


def test_unpriced_hardware_or_unknown_replicas_give_no_cost():
    assert resource_cost(PRICES, accelerator="ascend", product=None, devices=1, replicas=1, tokens_per_second=100,
                         realised_gain=None) is None
    for replicas in (None, -1, float("nan")):
        assert resource_cost(PRICES, accelerator="nvidia", product=None, devices=1, replicas=replicas,
                             tokens_per_second=100, realised_gain=None) is None


@pytest.mark.parametrize("cost, where", [
    ({"accelerators": {"nvidia": -1}}, "cost.accelerators.nvidia"),
    ({"accelerators": {"nvidia": 0}}, "cost.accelerators.nvidia"),
    ({"accelerators": {"nvidia": "nan"}}, "cost.accelerators.nvidia"),
    ({"accelerators": {"tpu": 1.0}}, "cost.accelerators.tpu"),
    ({"products": {"H100 SXM": 1.0}}, "cost.products.H100 SXM"),
    ({"currency": "dollars"}, "cost.currency"),
    ({"perHour": 1.0}, "cost.perHour"),
])
def test_bad_prices_are_refused_naming_the_field(cost, where):
    with pytest.raises(ConfigError) as error:
        parse_config({"cost": cost})
    assert where in str(error.value)


# ---- K in force -----------------------------------------------------------------------------------
@pytest.mark.parametrize("effective, expected", [
    (None, {}),
    ({"method": "eagle3", "numSpeculativeTokens": 3}, {"1+": 3}),
    ({"method": "none", "numSpeculativeTokens": 0}, {"1+": 0}),
    ({"numSpeculativeTokens": 4, "schedule": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                                              {"minBatchSize": 9, "maxBatchSize": 64, "numSpeculativeTokens": 2},
                                              {"minBatchSize": 65, "maxBatchSize": 256, "numSpeculativeTokens": 0}]},
     {"1-8": 4, "9-64": 2, "65+": 0}),
    # vLLM's semantics: a gap inherits the range before it, and beyond the last range its K holds
    ({"numSpeculativeTokens": 3, "schedule": [{"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": 3},
                                              {"minBatchSize": 10, "maxBatchSize": 10, "numSpeculativeTokens": 1}]},
     {"1-9": 3, "10+": 1}),
    ({"method": "eagle3"}, {}),
])
def test_k_in_force_per_batch_size_range(effective, expected):
    assert k_in_force(None if effective is None else EffectiveConfig.model_validate(effective)) == expected


# ---- the tuning loop: status.cost and the per-resource series ---------------------------------------
def priced_loop(resources, kube, prices):
    return TuningLoop(kube=kube, resources=lambda: resources, settings=SETTINGS, default_url="http://prometheus:9090",
                      events=kube, clock=lambda: NOW, prices=prices)


def test_the_loop_writes_status_cost_and_exports_it(fake_prometheus):
    fake_prometheus(high_acceptance("priced"))
    resources, kube = [resource("priced")], FakeKube()
    resources[0]["spec"]["hardware"] = {"accelerator": "nvidia", "count": 2}
    resources[0]["status"]["replicas"] = 3
    run_tick(resources, kube, loop=priced_loop(resources, kube, PRICES))
    status = kube.patches[0][1]["status"]
    tokens = status["metrics"]["tokensPerSecond"]
    assert tokens > 0
    assert status["cost"]["currency"] == "EUR" and status["cost"]["pricePerHour"] == 15.0  # 3 x 2 x 2.5
    assert status["cost"]["perMillionTokens"] == pytest.approx(15.0 / (tokens * 3600) * 1e6, rel=1e-5)
    exported = value("specinfer_operator_cost_per_million_tokens", namespace="ns", name="priced", currency="EUR")
    assert exported == pytest.approx(status["cost"]["perMillionTokens"], rel=1e-5)


def test_without_a_price_there_is_no_cost_anywhere(fake_prometheus):
    fake_prometheus(high_acceptance("unpriced"))
    resources, kube = [resource("unpriced")], FakeKube()
    run_tick(resources, kube, loop=priced_loop(resources, kube, CostConfig(accelerators={"amd": 3.0})))
    assert "cost" not in kube.patches[0][1]["status"]
    assert not [s for s in metrics.COST_PER_MILLION_TOKENS.collect()[0].samples if s.labels["name"] == "unpriced"]


def test_per_resource_series_follow_the_status_and_leave_with_the_resource(fake_prometheus):
    fake_prometheus(high_acceptance("watched"))
    resources, kube = [resource("watched")], FakeKube()
    run_tick(resources, kube)
    labels = {"namespace": "ns", "name": "watched"}
    assert value("specinfer_operator_tuning_degraded", **labels, reason="AsExpected") == 0.0
    assert value("specinfer_operator_tuning_restart_budget", **labels) == 6  # the example's maxRestartsPerHour
    status = kube.patches[0][1]["status"]
    action = status["tuning"]["lastDecision"]["action"]
    assert action in ("setK", "setSchedule")  # high acceptance at batch 1: a larger K
    assert value("specinfer_operator_tuning_restarts_last_hour", **labels) == status["tuning"]["restartsLastHour"] == 1
    assert value("specinfer_operator_tuning_changes_total", **labels, action=action) == 1
    assert value("specinfer_operator_tuning_changes_total", **labels, action="rollback") == 0  # there from the start
    # status.effective: K=3, and none above the crossover the prior predicts (an engine retuned in place)
    assert value("specinfer_operator_k_in_force", **labels, batch_size="1-128") == 3
    assert value("specinfer_operator_k_in_force", **labels, batch_size="129+") == 0
    speedup = value("specinfer_operator_tuning_predicted_speedup", **labels)
    assert speedup is not None and speedup > 1.05  # 92% first-position acceptance at batch 1 pays well

    fake_prometheus({}, down=True)  # Prometheus away: TuningDegraded, and the old reason's series goes
    run_tick(resources, FakeKube(), NOW + 60)
    assert value("specinfer_operator_tuning_degraded", **labels, reason="PrometheusUnreachable") == 1.0
    assert value("specinfer_operator_tuning_degraded", **labels, reason="AsExpected") is None
    # no decision, no prediction: the belief of a minute ago is not shown as today's
    assert value("specinfer_operator_tuning_predicted_speedup", **labels) is None

    resources[0]["spec"]["tuning"]["mode"] = "off"
    run_tick(resources, FakeKube(), NOW + 120)
    for name in ("specinfer_operator_tuning_degraded", "specinfer_operator_tuning_restart_budget",
                 "specinfer_operator_tuning_predicted_speedup", "specinfer_operator_k_in_force",
                 "specinfer_operator_tuning_changes_total"):
        family = name.removesuffix("_total")
        samples = [s for m in metrics.REGISTRY.collect() if m.name == family for s in m.samples
                   if s.labels.get("name") == "watched"]
        assert samples == [], name


def test_a_replica_going_standby_drops_its_per_resource_series(fake_prometheus):
    """After a failover the new active replica's series are the true ones: the old one must not keep
    exporting stale values that alerts would fire on."""
    fake_prometheus(high_acceptance("handed"))
    resources, kube = [resource("handed")], FakeKube()
    state = {"active": True}
    loop = TuningLoop(kube=kube, resources=lambda: resources, settings=SETTINGS, default_url="http://prometheus:9090",
                      events=kube, clock=lambda: NOW, active=lambda: state["active"])
    run_tick(resources, kube, NOW, loop)
    assert value("specinfer_operator_tuning_restart_budget", namespace="ns", name="handed") == 6
    state["active"] = False
    run_tick(resources, kube, NOW + 30, loop)
    assert value("specinfer_operator_tuning_restart_budget", namespace="ns", name="handed") is None


def test_repeated_recommendations_are_not_counted_as_changes(fake_prometheus):
    fake_prometheus(high_acceptance("advised"))
    resources, kube = [resource("advised", mode="observe")], FakeKube()
    for offset in (0, 60, 120):
        run_tick(resources, kube, NOW + offset)
        apply_back(resources, kube)
    assert resources[0]["status"]["tuning"]["lastDecision"]["action"] == "recommend"
    for action in ("setK", "setSchedule", "disable", "reenable", "rollback"):
        assert value("specinfer_operator_tuning_changes_total", namespace="ns", name="advised", action=action) == 0
