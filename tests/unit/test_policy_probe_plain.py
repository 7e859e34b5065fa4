"""A rollout to speculation off waits for the plain step to be measured (probe.plain_probe_for).

The world of the first tests is the bench's mtp-slow-peak engine (an MTP module on Ascend, which drafts the
engine's startup K on every step), with the cells its tuner held at minute 33, replayed: K = 1-2 at the
quiet and ramp batch sizes, K=1 alone at the peak's 217-226. There the fit put the plain decode step 7%
under the engine's; at this module's acceptance (PREFIX) it sees speculation off at batch 219-224 gaining
+6.8% where it loses 0.7% (the bench's own acceptance: +5.7% where it loses 1.7%, and the rollout it took,
8 minutes of reloads, turned speculation off as the peak ended).
"""

from __future__ import annotations

import importlib

import pytest

from specinfer.bench import tuner as bench_tuner
from specinfer.bench.scenarios import SCENARIOS, Engine
from specinfer.operator.tuner.policy import DraftConfig, TuningInput
from specinfer.operator.tuner.policy import probe as probe_module
from specinfer.operator.tuner.policy.cost import CostModel, terms
from specinfer.operator.tuner.policy.goodput import Model, goodput
from specinfer.operator.tuner.policy.inputs import CostPrior
from specinfer.operator.tuner.policy.state import PolicyState
from tests.unit import test_policy_probe as probe_tests
from tests.unit.test_policy_probe_split import World as HeavyHeadWorld

pytestmark = pytest.mark.unit

PEAK = (219, 220, 221, 223, 224)
DISTRIBUTION = [(b, 1 / len(PEAK)) for b in PEAK]
PREFIX = [0.8, 0.6, 0.45]
K1 = DraftConfig(num_speculative_tokens=1)
OFF = DraftConfig(num_speculative_tokens=0)
# (batch size, K, startup K): milliseconds, weight (windows) -- the bench's cells, noise and all
REPLAYED = {
    (217, 1, 1): (61.23, 0.81), (218, 1, 1): (62.31, 0.81), (219, 1, 1): (61.41, 2.0), (220, 1, 1): (64.05, 2.0),
    (221, 1, 1): (60.92, 2.0), (222, 1, 1): (61.8, 1.0), (223, 1, 1): (63.63, 2.0), (224, 1, 1): (64.01, 2.0),
    (225, 1, 1): (62.7, 1.78), (226, 1, 1): (62.55, 2.0), (23, 2, 2): (17.41, 0.99), (24, 2, 2): (17.56, 0.99),
    (25, 2, 2): (17.9, 0.99), (4, 2, 2): (12.97, 9.44), (57, 2, 2): (28.62, 0.99), (58, 2, 2): (28.77, 0.99),
    (59, 2, 2): (30.25, 0.99), (60, 2, 2): (29.68, 0.99), (62, 2, 2): (30.35, 0.99), (63, 2, 2): (30.88, 0.99),
    (5, 1, 1): (11.43, 1.8), (5, 2, 2): (13.08, 9.85), (6, 1, 1): (11.59, 1.8), (6, 2, 2): (13.07, 9.85),
    (93, 1, 2): (30.72, 0.99), (94, 1, 2): (30.83, 0.99), (95, 1, 2): (31.83, 0.99), (96, 1, 2): (31.89, 0.99),
    (97, 1, 2): (32.04, 0.99),
}


class MtpWorld:
    """The scenario's engine and the cells its tuner held before the switch-off."""

    def __init__(self) -> None:
        scenario = SCENARIOS["mtp-slow-peak"]
        self.tuning = bench_tuner.tuning_input(scenario).model_copy(update={"probe_in_place": True})
        self.engine = Engine(scenario, bench_tuner.initial_config(scenario), envelope=bench_tuner.envelope_of(scenario))
        self.cells: dict[str, list] = {}
        for (b, k, startup), (ms, weight) in REPLAYED.items():
            self.put(b, k, startup, ms / 1000, weight)

    def put(self, batch_size: int, k: int, startup: int, seconds: float, weight: float) -> None:
        x = terms(self.tuning.cost_prior, batch_size, k, self.tuning.cost_shape, True, startup)
        self.cells[f"{batch_size}:{k}{'s' if k == 0 else ''}@{startup}"] = [list(x), seconds, weight]

    def measure_k0(self) -> None:
        """The probe's window: a schedule's K = 0 at the peak, the module drafting its startup K=1."""
        for b in PEAK:
            self.put(b, 0, 1, self.engine.step_time(b, 0, K1), 1.0)

    def model(self) -> Model:
        cost = CostModel(self.tuning.cost_prior, self.tuning.cost_shape, self.cells)
        return Model(PREFIX, cost, cost.multipliers(), always_scheduled=True)

    def plain_error(self) -> float:
        return self.model().step_time(220, 0) / self.engine.step_time(220, 0, OFF) - 1

    def off_gain(self) -> float:
        top = self.tuning.max_batch_size
        model = self.model()
        return goodput(model, OFF.dense(top), DISTRIBUTION) / goodput(model, K1.dense(top), DISTRIBUTION) - 1

    def true_off_gain(self) -> float:
        return self.engine.step_time(220, 1, K1) / self.engine.step_time(220, 0, OFF) / (1 + PREFIX[0]) - 1


def _plain_probe(world, distribution=DISTRIBUTION, refused=None, gain=None):
    top = world.tuning.max_batch_size
    return probe_module.plain_probe_for(world.model(), world.tuning, K1, OFF.dense(top) if refused is None else refused,
                                        world.off_gain() if gain is None else gain, distribution, PolicyState(), 0.0)


def test_a_switch_off_on_an_unmeasured_plain_step_measures_it_first():
    world = MtpWorld()
    assert world.plain_error() < -0.05 and world.off_gain() > 0.05 > world.true_off_gain() + 0.05  # the miss
    probe = _plain_probe(world)
    assert probe is not None and probe.k == 0 and probe.batch_sizes == PEAK, probe
    dense = probe.config.dense(world.tuning.max_batch_size)
    assert all(dense[b] == 0 for b in PEAK) and not probe.config.off  # in place: the module stays loaded
    assert dense[PEAK[0] - 1] == 1 and dense[PEAK[-1] + 1] == 1
    assert "no step without verified drafts was measured there" in probe.describe()
    assert probe.predicted_loss > -0.02  # by today's fit K = 0 there is nearly off: a cheap window
    world.measure_k0()
    # measured: the plain step within 1.5% of the engine's, and speculation off no longer a gain
    assert abs(world.plain_error()) < 0.015 and world.off_gain() < 0, (world.plain_error(), world.off_gain())
    assert _plain_probe(world, gain=0.05) is None  # and nothing left to measure there


def test_no_plain_probe_for_a_rollout_that_keeps_drafting():
    world = MtpWorld()
    top = world.tuning.max_batch_size
    assert _plain_probe(world, refused=DraftConfig(num_speculative_tokens=2).dense(top), gain=0.05) is None
    assert _plain_probe(world, gain=-0.01) is None


def test_no_plain_probe_where_the_drafters_pass_is_much_of_a_k0_step(monkeypatch):
    """A 4x EAGLE-3 head (heavy-drafter-peak): a K = 0 window would measure the head's first pass as much as
    the plain step, and the fit, handed it, gave up a switch-off worth +13% in the bench."""
    world = HeavyHeadWorld()
    model = world.model()
    sizes = (204, 206, 208, 210)
    assert all(model.step_time(b, 0, True) > (1 + probe_module.MAX_FIRST_PASS_SHARE) * model.step_time(b, 0, False)
               for b in sizes)
    top = world.tuning.max_batch_size
    distribution = [(b, 0.25) for b in sizes]

    def plain_probe() -> probe_module.Probe | None:
        return probe_module.plain_probe_for(model, world.tuning, K1, OFF.dense(top), 0.1, distribution,
                                            PolicyState(), 0.0)

    assert plain_probe() is None
    monkeypatch.setattr(probe_module, "MAX_FIRST_PASS_SHARE", 1.0)
    assert plain_probe() is not None  # the share alone held it


def test_what_measures_the_plain_step():
    """Plain decode cells and a schedule's K = 0, near the batch size; a pooled cell (vLLM's series) at its
    own mean batch size, not over the quarter-to-fourfold mix its span credits elsewhere."""
    world = MtpWorld()
    x = world.cells["220:1@1"][0]

    def measured(key: str, size: int = 220) -> bool:
        return probe_module._plain_measured(CostModel(world.tuning.cost_prior, world.tuning.cost_shape,
                                                      {key: [x, 0.035, 1.0]}), size)

    assert measured("200:0") and measured("210:0s@1") and measured("pooled:220:0:None")
    assert measured("pooled:200:1:((1, 180, 1), (181, 256, 0))")  # K = 0 where that window's mean ran
    assert not measured("120:0") and not measured("pooled:60:0:None") and not measured("220:1@1")
    assert not measured("220:0s@1", size=100)


# A world the prior prices exactly, with an MTP-like drafter: one cheap pass, and little per drafted token.
CHEAP_DRAFTER = CostPrior(floorSeconds=0.007, computePerTokenSeconds=5.5e-5, kvPerSequenceSeconds=3e-5,
                          draftPassSeconds=0.0003, draftTokenSeconds=1e-6)
PEAK_LOAD = {200: 0.5, 204: 0.5}


def _cheap_drafter_world(batch_size: int, k: int, speculative: bool) -> float:
    p = CHEAP_DRAFTER
    passes = k if k > 0 else (1 if speculative else 0)
    tokens = batch_size * (k + 1)
    roof = (p.floor ** 3 + (p.compute_per_token * tokens) ** 3) ** (1 / 3)
    return roof + p.kv_per_sequence * batch_size + p.draft_pass * passes + p.draft_token * batch_size * max(k, passes)


def _closed_loop(monkeypatch) -> tuple[list, DraftConfig]:
    monkeypatch.setattr(probe_tests, "HEAD_PREFIX", [0.3, 0.1, 0.03, 0.01])  # off wins at this load
    tune: TuningInput = probe_tests.tuning(costPrior=CHEAP_DRAFTER, maxBatchSize=256, downtimeFraction=0.0)
    return probe_tests.closed_loop(tune, world=_cheap_drafter_world, k=1, batch_sizes=PEAK_LOAD, ticks=16)


def test_decide_issues_the_plain_probe_before_the_rollout(monkeypatch):
    decisions, final = _closed_loop(monkeypatch)
    changes = [d for d in decisions if d.is_change]
    assert changes and changes[0].probe and changes[0].path == "inPlace", [d.reason for d in changes]
    assert "no step without verified drafts" in changes[0].reason
    disable = next(d for d in changes if d.action == "disable")  # measured, speculation off still wins
    assert changes.index(disable) > 1 and final.off, [d.reason for d in changes]


def test_without_the_plain_probe_the_rollout_goes_on_the_fit_alone(monkeypatch):
    """The wiring: the same loop with no plain probe to issue switches off at once."""
    decide_module = importlib.import_module("specinfer.operator.tuner.policy.decide")
    monkeypatch.setattr(decide_module, "plain_probe_for", lambda *args, **kwargs: None)
    decisions, final = _closed_loop(monkeypatch)
    changes = [d for d in decisions if d.is_change]
    assert changes and changes[0].action == "disable" and final.off, [d.reason for d in changes]
