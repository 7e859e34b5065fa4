"""Probes at a peak (operator/tuner/policy/probe.py): what one K measured at a large batch cannot tell.

The world is the bench's heavy-drafter-peak engine (an 8B target whose EAGLE-3 head costs 4x its prior),
measured where the tuner measures it: K = 1-3 in the quiet phase at batch 3, K = 1 alone at the peak's
batch sizes 204-210. There a K = 1 step is the target's compute over 2B tokens, its KV reads over B
sequences and the head's work; the prior decides the split, and the fit puts the plain decode step ~17%
above the engine's, so speculation off (which gains ~+13% there) looks like +2%.
"""

from __future__ import annotations

import importlib

import pytest

from specinfer.bench import tuner as bench_tuner
from specinfer.bench.scenarios import SCENARIOS, Engine
from specinfer.operator.tuner.policy import DraftConfig
from specinfer.operator.tuner.policy import probe as probe_module
from specinfer.operator.tuner.policy.cost import CostModel, terms
from specinfer.operator.tuner.policy.goodput import Model, goodput
from specinfer.operator.tuner.policy.state import PolicyState
from tests.unit import test_policy_probe as probe_tests

pytestmark = pytest.mark.unit

PEAK = (204, 206, 208, 210)
DISTRIBUTION = [(b, 1 / len(PEAK)) for b in PEAK]
PREFIX = [0.7, 0.5, 0.35, 0.25] + [0.15] * 12
K1 = DraftConfig(num_speculative_tokens=1)


class World:
    """The scenario's engine and the cells the tuner would hold from it."""

    def __init__(self, quiet: tuple[int, ...] = (3,), quiet_ks: tuple[int, ...] = (1, 2, 3),
                 k1_also_at: tuple[int, ...] = ()) -> None:
        """K = `quiet_ks` measured at the `quiet` batch sizes, K = 1 at `k1_also_at` and at the peak."""
        scenario = SCENARIOS["heavy-drafter-peak"]
        self.tuning = bench_tuner.tuning_input(scenario).model_copy(update={"probe_in_place": True})
        self.engine = Engine(scenario, bench_tuner.initial_config(scenario), envelope=bench_tuner.envelope_of(scenario))
        self.cost = CostModel(self.tuning.cost_prior, self.tuning.cost_shape, {})
        for b in quiet:
            for k in quiet_ks:
                self.measure(b, k)
        for b in (*k1_also_at, *PEAK):
            self.measure(b, 1)

    def measure(self, batch_size: int, k: int) -> None:
        """A full window of this (B, K) in place (a schedule's K = 0 is a "B:0s" cell)."""
        seconds = self.engine.step_time(batch_size, k, DraftConfig(num_speculative_tokens=max(k, 1)))
        x = terms(self.tuning.cost_prior, batch_size, k, self.tuning.cost_shape, True, max(k, 1))
        self.cost.add(f"{batch_size}:{k}{'s' if k == 0 else ''}", x, seconds, 200)

    def model(self) -> Model:
        return Model(PREFIX[:self.tuning.k_max], self.cost, self.cost.multipliers(), always_scheduled=True)

    def plain_error(self) -> float:
        """The fit's plain decode step at batch 206 against the engine's."""
        truth = self.engine.step_time(206, 0, DraftConfig(num_speculative_tokens=0))
        return self.model().step_time(206, 0) / truth - 1

    def off_gain(self) -> float:
        top = self.tuning.max_batch_size
        model = self.model()
        return goodput(model, [0] * (top + 1), DISTRIBUTION) / goodput(model, K1.dense(top), DISTRIBUTION) - 1


def test_the_per_sequence_split_is_probed_at_the_peak():
    world = World()
    assert world.plain_error() > 0.12 and world.off_gain() < 0.05  # the miss the probe is for
    probe = probe_module.probe_for(world.model(), world.tuning, K1, DISTRIBUTION, PolicyState(), 0.0, 0.01)
    assert probe is not None and probe.doubted is probe_module.PER_SEQUENCE, probe
    assert probe.k == 0 and probe.batch_sizes == PEAK and probe.predicted_loss < 0
    dense = probe.config.dense(world.tuning.max_batch_size)
    assert all(dense[b] == 0 for b in PEAK) and not probe.config.off  # in place: the drafter stays loaded
    assert "KV reads per sequence 3x cheaper" in probe.describe()


def test_one_window_tells_the_fits_apart_at_twice_the_noise_with_the_plugins_series_three_times_with_vllms():
    """The noise bound on a probe's separation (probe.noise_bound): twice the measured noise with the plugin's
    per-batch-size series, three times with vLLM's pooled one."""
    world = World()
    model = world.model()
    probe = probe_module.probe_for(model, world.tuning, K1, DISTRIBUTION, PolicyState(), 0.0, 0.01)
    assert probe is not None and probe.k == 0, probe
    other = probe_module.doubted_model(model, probe.doubt, probe.doubted)
    apart = max(abs(other.served_step_time(b, 0, True) / model.served_step_time(b, 0, True) - 1) for b in PEAK)
    assert apart > 2 * probe.doubted.min_separation  # the noise, not the doubt's floor, decides below

    def probed(noise: float, per_batch_size: bool) -> bool:
        found = probe_module.probe_for(model, world.tuning, K1, DISTRIBUTION, PolicyState(), 0.0, noise,
                                       per_batch_size=per_batch_size)
        return found is not None and found.k == 0

    between = apart / 2.5  # twice this is under the fits' separation, three times over it
    assert probed(between, per_batch_size=True) and not probed(between, per_batch_size=False)
    assert probed(apart / 3.2, per_batch_size=False)
    assert not probed(apart / 1.9, per_batch_size=True)


def test_where_k0_would_cost_more_than_the_doubt_may_gain_the_k_above_is_probed():
    """The cells the bench's heavy-spikes held at its first spike (its engine is heavy-drafter-peak's: the same
    target and 4x head): K = 2, 3, 6 in the quiet at batch 2-3, K = 1 on the way up and at the peak. The fit prices
    a plain step 23% above the engine's and sees speculation off losing 2% where it gains 13%. A window of K = 0
    (the head's first pass still runs) would be priced 3.5% apart by the two fits, under the 4% that tells them;
    one of K = 2 tells the split."""
    world = World(quiet=(2, 3), quiet_ks=(2, 3, 6), k1_also_at=(97, 100, 104, 108))
    assert world.plain_error() > 0.2 and world.off_gain() < 0
    probe = probe_module.probe_for(world.model(), world.tuning, K1, DISTRIBUTION, PolicyState(), 0.0, 0.01,
                                   per_batch_size=True)
    assert probe is not None and probe.k == 2 and probe.batch_sizes == PEAK, probe
    assert probe.doubted is probe_module.PER_SEQUENCE and probe.doubt < 1 and probe.doubted_best.off
    assert -probe_module.LOSS_PER_GAIN * probe.doubted_gain <= probe.predicted_loss < 0
    # K = 0 was not telling: today's fit and the doubted one price its step less than 4% apart
    model, other = world.model(), probe_module.doubted_model(world.model(), probe.doubt, probe.doubted)
    apart = max(abs(other.served_step_time(b, 0, True) / model.served_step_time(b, 0, True) - 1) for b in PEAK)
    assert apart < probe_module.SETTLE_SEPARATION
    assert "speculation off would gain" in probe.describe() and "K=2 is not measured there" in probe.describe()
    # not with vLLM's pooled series: its window would mix K=2 with K=1 at the batch sizes around these
    assert probe_module.probe_for(world.model(), world.tuning, K1, DISTRIBUTION, PolicyState(), 0.0, 0.01,
                                  per_batch_size=False) is None
    for b in PEAK:
        world.measure(b, probe.k)
    # measured, the fit's plain step comes within 10% of the engine's and speculation off wins by what it gains
    assert world.plain_error() < 0.1 and world.off_gain() > 0.08


def test_without_the_per_sequence_doubt_nothing_is_probed(monkeypatch):
    """The drafter's doubt alone sees nothing to measure: K = 1-3 at batch 3 pinned the head's passes."""
    monkeypatch.setattr(probe_module, "DOUBTS", (probe_module.DRAFTER,))
    world = World()
    assert probe_module.probe_for(world.model(), world.tuning, K1, DISTRIBUTION, PolicyState(), 0.0, 0.01) is None


def test_a_rollout_the_drafters_doubt_holds_is_settled_by_another_k():
    """K = 0 measured at the peak runs the head's first pass: which share of it is the head stays the
    prior's call, and the fit with the head 3x cheaper calls speculation off a loss. The settling probe
    measures a K above today's, which narrows that doubt and brings the fit's plain step towards the engine's."""
    world = World()
    for b in PEAK:
        world.measure(b, 0)
    top = world.tuning.max_batch_size
    off = [0] * (top + 1)
    losing = probe_module.losing_doubts(world.model(), K1.dense(top), off, DISTRIBUTION)
    assert losing and losing[0][0] < 1, losing  # the rollout waits on the fit with the head 3x cheaper
    before = world.plain_error()

    def settling(refused_gain: float) -> probe_module.Probe | None:
        return probe_module.settling_probe_for(world.model(), world.tuning, K1, off, refused_gain, DISTRIBUTION,
                                               PolicyState(), 0.0, 0.01, per_batch_size=False)

    # its window's loss is bounded by what the rollout would gain: here the fit's own +2% buys no probe,
    # the +11% the bench's pooled windows showed at this point (vLLM's series) buys one
    assert world.off_gain() < 0.05 and settling(world.off_gain()) is None
    probe = settling(0.11)
    assert probe is not None and probe.k > 1 and probe.doubt < 1, probe
    assert probe.predicted_loss >= -probe_module.LOSS_PER_GAIN * 0.11
    assert "would lose" in probe.describe() and "a rollout to it waits on that" in probe.describe()
    for b in PEAK:
        world.measure(b, probe.k)
    # measured, the doubt narrows (the prior's shape still bends this engine's steps a little: -1% left of -5%)
    after = probe_module.losing_doubts(world.model(), K1.dense(top), off, DISTRIBUTION)
    assert all(gain > losing[0][1] / 2 for _, gain in after), (losing, after)
    assert world.off_gain() > 0.08 and world.plain_error() < before - 0.05


def test_no_settling_probe_where_no_doubted_fit_calls_the_rollout_a_loss():
    world = World()
    for b in PEAK:
        world.measure(b, 0)
    top = world.tuning.max_batch_size
    same = K1.dense(top)  # a candidate no fit sees losing (here: what runs) leaves nothing to settle ...
    assert probe_module.losing_doubts(world.model(), K1.dense(top), same, DISTRIBUTION) == []
    assert probe_module.settling_probe_for(world.model(), world.tuning, K1, same, 0.11, DISTRIBUTION,
                                           PolicyState(), 0.0, 0.01, per_batch_size=False) is None
    off = [0] * (top + 1)  # ... where speculation off, which one calls a loss, has one
    assert probe_module.settling_probe_for(world.model(), world.tuning, K1, off, 0.11, DISTRIBUTION,
                                           PolicyState(), 0.0, 0.01, per_batch_size=False) is not None


def _closed_loop_at_the_peak(monkeypatch, world: World):
    """The policy deciding window after window on this engine at batch 204-210, from K=1 in place (our
    plugin's series; Surge, so no payback holds a rollout)."""
    monkeypatch.setattr(probe_tests, "HEAD_PREFIX", PREFIX[:4])

    def step(batch_size: int, k: int, speculative: bool) -> float:
        config = DraftConfig(num_speculative_tokens=max(k, 1) if speculative else 0)
        return world.engine.step_time(batch_size, k if speculative else 0, config)

    tune = world.tuning.model_copy(update={"k_max": 4, "in_place_max_k": 4, "confirmations": 1,
                                           "cooldown_seconds": 20, "min_steps": 100, "min_drafts": 100,
                                           "downtime_fraction": 0.0})
    return probe_tests.closed_loop(tune, world=step, k=1, batch_sizes=dict(DISTRIBUTION), ticks=30)


def test_at_the_peak_the_probe_finds_speculation_off(monkeypatch):
    decisions, final = _closed_loop_at_the_peak(monkeypatch, World())
    probes = [d for d in decisions if d.probe]
    assert probes and "KV reads per sequence" in probes[0].reason, [d.reason for d in decisions if d.is_change]
    assert final.off, [d.reason for d in decisions if d.is_change]
    realised = [d.reason for d in decisions if d.guard == "verifying"]
    assert realised and "realised +" in realised[-1], realised  # and it serves more than K=1 did


def test_at_the_peak_without_the_per_sequence_doubt_k1_stays(monkeypatch):
    """The gap the per-sequence doubt closes: the same loop keeps K=1 at the peak throughout."""
    monkeypatch.setattr(probe_module, "DOUBTS", (probe_module.DRAFTER,))
    decisions, final = _closed_loop_at_the_peak(monkeypatch, World())
    assert not any(d.probe for d in decisions) and not final.off
    assert final.dense(256)[206] == 1, final



def test_a_rollout_held_by_the_doubt_asks_for_the_settling_probe(monkeypatch):
    """decide() wiring: where the `doubted` guard holds speculation off (the probe module's world at batch
    60-64) the policy asks for the settling probe with the refused rollout and its gain, and issues what it
    gets, in place, as a probe."""
    decide_module = importlib.import_module("specinfer.operator.tuner.policy.decide")
    monkeypatch.setattr(probe_tests, "HEAD_PREFIX", [0.8, 0.6, 0.45, 0.3])
    asked: list[tuple[list[int], float, bool]] = []

    def settling(model, tuning, current, refused, refused_gain, distribution, st, now, noise, *, per_batch_size):
        asked.append((list(refused), refused_gain, per_batch_size))
        dense = current.dense(tuning.max_batch_size)
        config = DraftConfig.from_dense([*dense[:60], *[4] * (len(dense) - 60)])
        return probe_module.Probe(config, 4, (60, 64), -0.1, DraftConfig(num_speculative_tokens=0), -0.05,
                                  1 / probe_module.DOUBT)

    monkeypatch.setattr(decide_module, "settling_probe_for", settling)
    decisions, _ = probe_tests.closed_loop(probe_tests.tuning(downtimeFraction=0.0), world=probe_tests.as_prior,
                                           k=1, batch_sizes={60: 0.3, 64: 0.7}, ticks=10)
    # the plugin's per-batch-size series: the noise bound the settling probe is told is theirs (probe.noise_bound)
    assert asked and all(not any(dense) and gain > 0 and by_size for dense, gain, by_size in asked), asked
    settled = [d for d in decisions if d.probe and "a rollout to it waits on that" in d.reason]
    assert settled and settled[0].path == "inPlace", [d.reason for d in decisions if d.is_change]


@pytest.mark.parametrize("doubt_keeps_the_drafter", [False, True])
def test_the_k_above_is_probed_only_for_a_doubt_that_turns_speculation_off(monkeypatch, doubt_keeps_the_drafter):
    """Its reason -- a K = 0 step runs the drafter's first pass, which hides the plain step -- is speculation off's
    alone. heavy-spikes' first spike, every doubt counted whatever it gains: where the doubted fits' choice is off,
    the K above is tried after each doubt's own side; made to keep K=1 at batch size 1 (a drafting schedule that
    drafts less at the peak), only each doubt's own side is."""
    world = World(quiet=(2, 3), quiet_ks=(2, 3, 6), k1_also_at=(97, 100, 104, 108))
    tried_above = []
    towards, best_here = probe_module._probe_towards, probe_module._best_here

    def spy(*args, beyond: bool = False, **kwargs):
        tried_above.append(beyond)
        return towards(*args, beyond=beyond, **kwargs)

    def keeping_the_drafter(*args, **kwargs):
        best = best_here(*args, **kwargs)
        return best if any(best) else [0, 1] + best[2:]

    monkeypatch.setattr(probe_module, "_probe_towards", spy)
    monkeypatch.setattr(probe_module, "MIN_GAIN", -1.0)
    if doubt_keeps_the_drafter:
        monkeypatch.setattr(probe_module, "_best_here", keeping_the_drafter)
    probe_module.probe_for(world.model(), world.tuning, K1, DISTRIBUTION, PolicyState(), 0.0, 0.01,
                           per_batch_size=True)
    assert False in tried_above and (True in tried_above) is not doubt_keeps_the_drafter, tried_above
