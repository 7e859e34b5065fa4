"""A probe in place: measure the K the prior alone has decided against, before trusting it.

With one K measured at today's batch sizes the step-cost model cannot tell how much of that step
is the target's decode and how much the drafter's passes: it splits the time as its prior's shape
does. When the prior misjudges the drafter, the model stays sure of a config that loses. The
real CPU engine showed it: an EAGLE-3 head whose passes cost ~3x what the prior said ran K=2 at
batch size 1 (5.7 ms a step) and the fit, scaling the prior, put a plain decode step at 3.5 ms where
it takes 1.5 -- so it kept K=2 at 335 tokens/s while speculation off served 659.

The doubt is made explicit: the same remembered step times are fitted again under priors whose
drafter terms (draft passes, drafted tokens, a speculative step's bookkeeping), or whose KV reads per
sequence (at a large batch: compute against reads), are DOUBT times dearer and cheaper. Both fits
explain every measurement equally well; they disagree only where nothing was measured. If the
current config is the best under today's fit but another config would gain at least MIN_GAIN under
one of the doubted fits, the policy runs a K towards that config at today's batch sizes -- in place,
so nothing restarts -- for a window, which measures that cell. After that window the engine goes
back in place to the config the probe replaced, and the ordinary optimiser decides from there with
two measured K instead of one.

What bounds its cost: only in place (a probe never restarts an engine), only when the step-time
predictions the probe separates differ by more than the measurement noise can blur, a predicted
loss for its windows of at most MAX_LOSS and LOSS_PER_GAIN times what the doubted fit would gain,
never a cell already measured, and not again at the same batch sizes and K for `rejectHoldSeconds`
(at least MIN_HOLD_SECONDS).
The K probed is the doubted fit's choice at today's batch sizes, or the unmeasured K nearest it
on the same side of today's that is cheap enough and telling -- or, where the doubted fit drafts less and
no K below is, the K just above today's (`_probe_towards`; with the plugin's per-batch-size series only).
With a model drafter a K = 0 step still runs the drafter's first pass (cost.draft_passes), so measuring "off" in
place measures that step, which the fit then splits with the drafter terms pinned by the other K measured -- not
wholly: the drafter's per-token work and the target's compute both grow with the batch, so a rollout taken on
such a split may still lose under a doubted fit (`doubted_loss`), and `settling_probe_for` measures the K that
narrows it. A rollout to speculation off on a plain step no window measured waits for K = 0 there
(`plain_probe_for`), where the drafter's first pass is a small share of that step. An engine whose schedule
drafts nothing at today's batch sizes and whose acceptance was never measured drafts there for a window
(`acceptance_probe_for`): without an acceptance nothing can be predicted. vLLM's own series
are probed only where the window runs one K across its batch sizes (their pooled step time mixes the
K of every batch size). Off unless the tuning input's `probeInPlace` is set (operator configuration
`tuning.policy`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specinfer.runtime.methods.schedule import effective_k

from .config import DraftConfig
from .cost import DRAFTER_TERMS, PER_SEQUENCE_TERMS, TERMS, CostModel
from .goodput import KEEP_TOLERANCE, Distribution, Model, goodput, is_speculative, prefill_per_token
from .inputs import TuningInput
from .state import PolicyState, ProbeRecord
from .support import SUPPORT_FACTOR, cell_span, plain_decode

DOUBT = 3.0  # how far the prior's drafter cost may be off (the CPU engine's EAGLE-3 head: ~3x)
MIN_GAIN = 0.03  # a doubted fit must see at least this much to be worth a window's measurement
MAX_LOSS = 0.35  # the probe's predicted loss (today's fit) for the windows it runs, at most ...
LOSS_PER_GAIN = 3.0  # ... and at most this many times the gain it may find (a found gain lasts many windows)
MIN_SEPARATION = 0.10  # the fits' predicted step times at the probed K differ by at least this (drafter doubt) ...
SETTLE_SEPARATION = 0.04  # ... (a probe at a large batch, or one a rollout waits on) ...
# ... and by this many times the measured window-to-window noise with the plugin's series, whose probe window times
# the probed K at the probed batch sizes alone: at the bench's heavy-spikes (noise ~1.8%) three times kept K=2 (4.6-4.9%
# apart) unmeasured until the third spike, twice measures it at the first (0.917 -> 0.954 of the per-phase oracle
# under Surge, 0.932 -> 0.936 under Replace) ...
PER_BATCH_SIZE_NOISE_SEPARATION = 2.0
# ... and by this many with vLLM's pooled series, which times no batch size apart: at twice, heavy-spikes' first probe
# with it went the other way (K=3, for the fit with the KV reads dearer, which would draft more), and the fit, given
# that window, never again saw speculation off win (0.956 -> 0.891 under Surge, 0.953 -> 0.891 under Replace) -- also
# with the probed K run wherever today's K runs, so that the pooled window holds one K: not the window's mix, the
# measurement itself moved the fit. At three times that probe is not taken and the pooled windows see off win from
# the second spike.
POOLED_NOISE_SEPARATION = 3.0
MEASURED_WEIGHT = 0.5  # a cell holding half a window of steps has measured its K there
# An engine that never measured its acceptance is stuck where it is (probe.acceptance_probe_for): its one window
# drafting K=1 is priced with every draft rejected, and a K=1 step on a compute-bound engine verifies twice the
# tokens of a K = 0 one -- the bench's cpu-small EAGLE-3 at batch 32: -35% at worst, +47% found (speculation off).
MAX_BLIND_LOSS = 0.5
MIN_HOLD_SECONDS = 1800.0  # a probe's hold whatever rejectHoldSeconds says (0 must not mean every window)
PROBE_MEMORY_SECONDS = 6 * 3600.0  # a probe's record outlives its hold while its cell may still shape the fit
# A schedule's K = 0 window measures the plain step where the drafter's pass(es) in it cost at most this share
# of the plain step by today's fit (an MTP module at batch 220: 7%). Above it (the bench's 4x EAGLE-3 head: 30%; a
# draft model drafting its startup K: 30-45%) the measured step is split by the drafter's terms again, and in
# heavy-drafter-peak the fit, given it, took the head's pass for the plain step and gave up an off worth +13%.
MAX_FIRST_PASS_SHARE = 0.10
DRAFTER_PRIOR_FIELDS = ("draft_pass", "draft_token", "speculation_step", "speculation_per_sequence")


@dataclass(frozen=True)
class Doubt:
    """A part of the prior's split of the step that one K measured at a batch size cannot check."""

    what: str
    fields: tuple[str, ...]  # the prior's fields it scales ...
    terms: tuple[int, ...]  # ... and the cost terms they make (cost.terms)
    min_separation: float  # the fits' predicted step times at the probed K differ by at least this


DRAFTER = Doubt("the drafter", DRAFTER_PRIOR_FIELDS, DRAFTER_TERMS, MIN_SEPARATION)
# At a large batch a K = 1 step is the target's compute over 2B tokens, its KV reads over B sequences and
# the drafter's work: how much is compute (which speculation off halves) and how much per-sequence reads
# (which it keeps) is the prior's call until another K is measured there. The bench's heavy-drafter-peak:
# with K=1 alone measured at batch ~210, the fit put the KV term at 1.5x its prior where the engine's is
# 0.7x, a plain step at 21.4 ms where it takes 18.6, and saw speculation off at +2.7% where it gains +13%
# -- and K = 0 there, which tells them apart, the two fits priced 4.4% apart: at a batch that large a window
# holds thousands of steps, and the noise bound (`noise_bound`) is what keeps the measurement telling
PER_SEQUENCE = Doubt("the KV reads per sequence", ("kv_per_sequence",), PER_SEQUENCE_TERMS, SETTLE_SEPARATION)
DOUBTS = (DRAFTER, PER_SEQUENCE)


@dataclass(frozen=True)
class Probe:
    """A config to run in place for a window, and why."""

    config: DraftConfig
    k: int  # the K it runs at today's batch sizes
    batch_sizes: tuple[int, ...]
    predicted_loss: float  # today's fit: goodput of the probe against the current config (< 0)
    doubted_best: DraftConfig  # what a doubted fit would choose ...
    doubted_gain: float  # ... and gain
    doubt: float  # the factor on the doubted terms of that fit
    doubted: Doubt = DRAFTER  # which terms
    # a probe no doubted fit asked for says why it runs instead: for plain_probe_for its doubted_best and
    # doubted_gain are the rollout it holds and today's fit's gain for it, at doubt 1; for
    # acceptance_probe_for, the probe's own config at no gain (nothing can be predicted yet)
    why: str | None = None

    def describe(self) -> str:
        sizes = self.batch_sizes
        where = f"batch size {sizes[0]}" if len(sizes) == 1 else f"batch sizes {sizes[0]}-{sizes[-1]}"
        if self.why is not None:
            return (f"probing K={self.k} at {where} in place for a window: {self.why}; "
                    f"predicted {self.predicted_loss:+.1%} while it runs")
        dearer = _dearer(self.doubt)
        verdict = (f"would gain {self.doubted_gain:+.1%}" if self.doubted_gain >= 0
                   else f"would lose {self.doubted_gain:+.1%}, and a rollout to it waits on that")
        return (f"probing K={self.k} at {where} in place for a window: with {self.doubted.what} {dearer} "
                f"than the step-cost prior says, {self.doubted_best.describe()} {verdict}, "
                f"and K={self.k} is not measured there; predicted {self.predicted_loss:+.1%} while it runs")


def doubted(cost: CostModel, factor: float, doubt: Doubt = DRAFTER) -> CostModel:
    """The same remembered cells under a prior whose `doubt` terms are `factor` times as dear.

    The terms are linear in those prior fields, so each cell's term vector scales column by column:
    the cells' step times are untouched, only what the ridge believes about unmeasured cells moves."""
    prior = cost.prior.model_copy(update={name: getattr(cost.prior, name) * factor for name in doubt.fields})
    scale = np.ones(TERMS)
    scale[list(doubt.terms)] = factor
    cells = {key: [list(np.asarray(x) * scale), seconds, weight] for key, (x, seconds, weight) in cost.cells.items()}
    return CostModel(prior, cost.cost_shape, cells, cost.prompt_per_generated)


def doubted_model(model: Model, factor: float, doubt: Doubt = DRAFTER) -> Model:
    """`model` refitted on its own cells under the doubted prior."""
    cost = doubted(model.cost, factor, doubt)
    return Model(model.prefix, cost, cost.multipliers(), model.schedule_factor, always_scheduled=model.always_scheduled)


def _dearer(factor: float) -> str:
    return f"{factor:g}x dearer" if factor > 1 else f"{1 / factor:g}x cheaper"


def doubted_loss(model: Model, tuning: TuningInput, current: DraftConfig, candidate: Sequence[int],
                 distribution: Distribution, st: PolicyState, now: float) -> str | None:
    """Why a rollout to `candidate` waits: a probe ran at today's batch sizes and the fit still holds
    what it measured there, and a fit with the drafter DOUBT times dearer or cheaper still predicts
    the rollout to lose.

    The probe was run because the prior's split of the step time was in doubt; acting on what it
    measured is sound only once the doubt no longer changes the answer. A model drafter's K = 0
    step measures the plain decode step plus the drafter's first pass, and which is which can stay
    the prior's call: at large batch sizes, where the compute above the floor grows with every
    token, a fit that splits them wrongly sees speculation off winning where it loses."""
    top = tuning.max_batch_size
    sizes = {max(1, min(int(size), top)) for size, _ in distribution}
    probed_here = [entry for entry in st.probed if sizes & set(entry.batch_sizes) and not entry.acceptance]
    if not any(measured_k(model.cost, b, entry.config.dense(top)[b]) for entry in probed_here
               for b in sizes & set(entry.batch_sizes)):
        return None  # no probe here, or its cell has faded from the fit: the prior alone is in doubt again
    for factor, gain in losing_doubts(model, current.dense(top), candidate, distribution):
        return (f"with the drafter {_dearer(factor)} than the step-cost prior says it would lose {gain:+.1%}: "
                "the probe here did not settle the doubt, and a rollout is not taken on it")
    return None


def losing_doubts(model: Model, current_dense: Sequence[int], candidate: Sequence[int],
                  distribution: Distribution) -> list[tuple[float, float]]:
    """(factor, gain) of each fit with the drafter DOUBT times dearer or cheaper under which `candidate` loses
    more than KEEP_TOLERANCE (the margin within which the optimiser calls two configs equal: with three K
    measured at a peak, the cheaper drafter's fit still said -0.2% for a switch-off worth +14%, its ridge
    pulling against the data)."""
    losing = []
    for factor in (DOUBT, 1 / DOUBT):
        other = doubted_model(model, factor)
        before = goodput(other, current_dense, distribution)
        gain = goodput(other, candidate, distribution) / before - 1 if before > 0 else 0.0
        if gain < -KEEP_TOLERANCE:
            losing.append((factor, gain))
    return losing


def measured_k(cost: CostModel, batch_size: int, k: int) -> bool:
    """A cell at this K covers `batch_size`: a per-batch-size cell ("B:K", or "B:0s" for a schedule's
    K = 0; "B:K@W" under any startup K W -- the probe asks whether the fit has seen this K here at all, and
    in place W does not change), or a pooled one (vLLM's series) whose config ran this K at its mean batch
    size."""
    weight = 0.0
    for key, (_, _, cell_weight) in cost.cells.items():
        span = cell_span(key)
        if span is not None and span[0] <= batch_size <= span[1] and cell_k(key) == k:
            weight += cell_weight
    return weight >= MEASURED_WEIGHT


def cell_k(key: str) -> int | None:
    """The K a cost cell measured: "B:K"; "B:0s" is a schedule's K = 0 (a plain decode step "B:0" is
    not: None); "B:K@W" and "B:0s@W" the same under a drafter that drafts its startup K W (cost.py keeps
    them apart by W); "pooled:B:K:schedule" (cost.CostModel.pooled_key) ran the config's K at B -- one K
    across the window's batch sizes, as the policy keeps it with vLLM's series (goodput.one_k_over)."""
    parts = key.split(":")
    try:
        if parts[0] != "pooled":
            k = parts[1].partition("@")[0]
            return int(k[:-1]) if k.endswith("s") else (None if k == "0" else int(k))
        if int(parts[2]) == 0:
            return None  # speculation off: plain decode steps
        schedule = ast.literal_eval(":".join(parts[3:]))
        return effective_k(round(float(parts[1])), int(parts[2]), schedule)
    except (IndexError, ValueError, TypeError, SyntaxError):
        return None


@dataclass(frozen=True)
class _Here:
    """What a probe is judged against: today's fit, config and load, and the one K it runs there."""

    model: Model
    tuning: TuningInput
    current_dense: list[int]
    k_now: int
    sizes: tuple[int, ...]  # today's batch sizes
    before: float  # today's goodput by the fit
    distribution: Distribution
    st: PolicyState
    now: float


def _here(model: Model, tuning: TuningInput, current: DraftConfig, distribution: Distribution, st: PolicyState,
          now: float) -> _Here | None:
    """None where nothing can be probed: no engine retuned in place, speculation off, no load, or today's batch
    sizes straddling a schedule boundary (one K measured each already)."""
    top = tuning.max_batch_size
    if tuning.in_place_max_k is None or current.off or not distribution:
        return None
    current_dense = list(current.dense(top))
    sizes = tuple(sorted({max(1, min(int(size), top)) for size, _ in distribution}))
    ks = {current_dense[b] for b in range(sizes[0], sizes[-1] + 1)}
    before = goodput(model, current_dense, distribution)
    if len(ks) != 1 or before <= 0:
        return None
    return _Here(model, tuning, current_dense, ks.pop(), sizes, before, distribution, st, now)


def probe_for(model: Model, tuning: TuningInput, current: DraftConfig, distribution: Distribution,
              st: PolicyState, now: float, noise: float, *, per_batch_size: bool = False) -> Probe | None:
    """The probe worth a window when `current` is today's best, or None. `per_batch_size`: the windows time steps
    per batch size (the plugin's series): the fits need differ by less noise (`noise_bound`), and only then is
    the K above today's probed for a doubt that turns speculation off (`_probe_towards`). vLLM's pooled latency
    mixes that K with today's at the batch sizes around the probed ones, and in the bench's heavy-drafter-peak
    (Surge) such a window took the doubt away from a switch-off worth +13% (0.939 -> 0.890 of the per-phase
    oracle); without it K = 0 was probed there a window later and the switch-off taken."""
    here = _here(model, tuning, current, distribution, st, now)
    if here is None:
        return None
    low, high = here.sizes[0], here.sizes[-1]
    doubts = []
    for doubt, factor in ((doubt, factor) for doubt in DOUBTS for factor in (DOUBT, 1 / DOUBT)):
        other = doubted_model(model, factor, doubt)
        best = _best_here(other, tuning, here.current_dense, distribution, here.sizes)
        gain = goodput(other, best, distribution) / goodput(other, here.current_dense, distribution) - 1
        if gain < MIN_GAIN:
            continue
        # The K that config runs at today's batch sizes (speculation off: a schedule's K = 0, in place).
        target = min(max(best[b] for b in range(low, high + 1)), tuning.in_place_max_k or 0) \
            if is_speculative(best) else 0
        doubts.append((doubt, factor, other, best, gain, target))
    # Each doubt's own side of today's K first; then, for a doubt that would turn speculation off, the K above
    # (`_probe_towards`): its reason -- a K = 0 step still runs the drafter's first pass -- is off's alone.
    for beyond in (False, True) if per_batch_size else (False,):
        for doubt, factor, other, best, gain, target in doubts:
            if beyond and is_speculative(best):
                continue
            probe = _probe_towards(here, other, target, max(doubt.min_separation, noise_bound(noise, per_batch_size)),
                                   min(MAX_LOSS, LOSS_PER_GAIN * gain), beyond=beyond)
            if probe is not None:
                config, k, loss = probe
                return Probe(config, k, here.sizes, loss, DraftConfig.from_dense(best), gain, factor, doubt)
    return None


def noise_bound(noise: float, per_batch_size: bool) -> float:
    """How far apart two fits' predicted step times must be for one window to tell them apart, given the measured
    window-to-window `noise`: twice it with the plugin's per-batch-size series, three times with vLLM's pooled one
    (what the bench measured with each: PER_BATCH_SIZE_NOISE_SEPARATION, POOLED_NOISE_SEPARATION)."""
    return (PER_BATCH_SIZE_NOISE_SEPARATION if per_batch_size else POOLED_NOISE_SEPARATION) * noise


def settling_probe_for(model: Model, tuning: TuningInput, current: DraftConfig, refused: Sequence[int],
                       refused_gain: float, distribution: Distribution, st: PolicyState, now: float,
                       noise: float, *, per_batch_size: bool) -> Probe | None:
    """The probe a rollout held by `doubted_loss` waits on: the unmeasured K nearest today's that tells
    today's fit from the doubted one that calls the rollout a loss.

    The first probe measured the K its doubt pointed to. A model drafter runs its first pass in a schedule's
    K = 0 step, so that K leaves the drafter's share of the step the prior's call, and a fit with the drafter
    cheaper can go on seeing the rollout lose whatever the window said. A K above today's (one more draft
    pass, B more drafted tokens) separates them. The bench's heavy-drafter-peak with vLLM's series: after
    K=0 was measured at batch 208 the fit saw speculation off at +11.3%, the drafter 3x cheaper at -5.6%,
    and the two priced K=2 there 6% apart; nothing else could settle it, and the peak was served at K=1.
    `per_batch_size`: the plugin's series, whose windows tell the fits apart at less noise (`noise_bound`)."""
    here = _here(model, tuning, current, distribution, st, now)
    if here is None or refused_gain <= 0:
        return None
    order = sorted((k for k in range((tuning.in_place_max_k or 0) + 1) if k != here.k_now),
                   key=lambda k: (abs(k - here.k_now), k))
    separation = max(SETTLE_SEPARATION, noise_bound(noise, per_batch_size))
    for factor, gain in losing_doubts(model, here.current_dense, refused, distribution):
        probe = _first_telling(here, doubted_model(model, factor), order, separation,
                               min(MAX_LOSS, LOSS_PER_GAIN * refused_gain))
        if probe is not None:
            config, k, loss = probe
            return Probe(config, k, here.sizes, loss, DraftConfig.from_dense(refused), gain, factor, DRAFTER)
    return None


def plain_probe_for(model: Model, tuning: TuningInput, current: DraftConfig, refused: Sequence[int],
                    refused_gain: float, distribution: Distribution, st: PolicyState, now: float) -> Probe | None:
    """The probe a rollout to speculation off waits on where no window measured a step without the target
    verifying drafts at today's batch sizes: K = 0 there, in place, for a window.

    With only drafting measured at a batch size, the plain step is the fit's extrapolation down in K, and
    at a large batch what decides it -- how much of a K=1 step the second token's compute is -- is the
    prior's split of compute against the per-step floor, which no doubt of the drafter or of the KV reads
    moves much. The bench's mtp-slow-peak: with K=1 alone measured at batch ~220 the fit put the plain step
    7% under what the engine takes and saw off at +5.7% where it loses 1.7%; every doubted fit agreed, and
    the rollout, 8 minutes of reloads, turned speculation off at the peak's end for the ramp down. A
    schedule's K = 0 step there is that plain step plus the drafter's first pass, which the other K
    measured pin (and `doubted_loss` then checks the split): the fit put the plain step within 0.3%. Only
    where that pass is a small share of the step (MAX_FIRST_PASS_SHARE)."""
    if refused_gain <= 0 or is_speculative(refused):
        return None
    here = _here(model, tuning, current, distribution, st, now)
    if here is None or any(_plain_measured(model.cost, b) for b in here.sizes):
        return None
    envelope = max(here.current_dense)  # a drafter that drafts its startup K runs that many passes at K = 0
    if any(model.step_time(b, 0, True, envelope) > (1 + MAX_FIRST_PASS_SHARE) * model.step_time(b, 0, False)
           for b in here.sizes):
        return None  # the window would measure the drafter's pass as much as the plain step
    # no doubted fit to tell apart here: today's own, with no separation asked, leaves only the loss bound
    probe = _first_telling(here, model, [0], 0.0, min(MAX_LOSS, LOSS_PER_GAIN * refused_gain))
    if probe is None:
        return None
    config, k, loss = probe
    why = (f"{DraftConfig.from_dense(refused).describe()} would gain {refused_gain:+.1%} by today's fit, but no "
           "step without verified drafts was measured there (the fit's plain step is drafting steps' time split "
           "by the prior's shape), and the rollout waits on that window")
    return Probe(config, k, here.sizes, loss, DraftConfig.from_dense(refused), refused_gain, 1.0, DRAFTER, why)


def acceptance_probe_for(cost: CostModel, tuning: TuningInput, current: DraftConfig, distribution: Distribution,
                         st: PolicyState, now: float, *, one_k: bool = False) -> Probe | None:
    """The probe an engine waits on that has never had its acceptance measured because its schedule drafts
    nothing at today's batch sizes: the cheapest K that drafts, there, in place, for a window.

    An engine started under a load above its first schedule's crossover runs that schedule's K = 0 range:
    a model drafter still runs its first pass in every step, a window holds a few drafts or none, and with
    no acceptance known nothing can be predicted -- so nothing changed, however much speculation off (or
    drafting) would gain. One window of K drafting measures the acceptance; after it the engine goes back to
    the config the probe replaced and the optimiser decides from there. Priced at acceptance 0 (every draft
    rejected), the worst the window can do, and bounded by MAX_BLIND_LOSS: staying costs more, window after
    window."""
    top = tuning.max_batch_size
    if tuning.in_place_max_k is None or current.off or current.adaptive or not distribution:
        return None
    k = max(1, tuning.k_min)
    if k > tuning.in_place_max_k:
        return None
    current_dense = list(current.dense(top))
    today = tuple(sorted({max(1, min(int(size), top)) for size, _ in distribution}))
    # the batch sizes today's schedule drafts nothing at (a dip below its K = 0 range drafts a few: the
    # caller has found them too few)
    sizes = tuple(b for b in today if current_dense[b] == 0)
    if not sizes:
        return None
    if one_k:  # vLLM's pooled series: the window runs one K across all of today's batch sizes (`_here`)
        sizes = today
    dense = _probe_dense(tuning, current_dense, k, 0, sizes[0], sizes[-1])
    if dense is None or _held(st, dense, top, now):
        return None
    theta = cost.multipliers()
    config_k = max(max(dense), max(current_dense)) if cost.drafts_startup_k() else None

    prefill = prefill_per_token(cost, theta)

    def tokens_per_second(ks: Sequence[int]) -> float:
        # acceptance 0: one token a request-step whatever the K, so only the steps' times differ
        return sum(f * size / (cost.step_time(size, ks[min(max(1, int(size)), top)], theta, True, config_k)
                               + prefill * size) for size, f in distribution)

    before = tokens_per_second(current_dense)
    loss = tokens_per_second(dense) / before - 1 if before > 0 else -1.0
    if loss < -MAX_BLIND_LOSS:
        return None
    config = DraftConfig.from_dense(dense)
    why = (f"no acceptance has been measured and today's schedule drafts nothing at these batch sizes, so nothing "
           f"can be predicted; K={k} there measures it (priced with every draft rejected)")
    return Probe(config, k, sizes, loss, config, 0.0, 1.0, DRAFTER, why)


def _plain_measured(cost: CostModel, batch_size: int) -> bool:
    """Cells of plain decode steps ("B:0", pooled with speculation off) or of a schedule's K = 0 within
    SUPPORT_FACTOR of `batch_size` hold half a window of steps. A pooled cell (vLLM's series) counts at its
    own mean batch size, not over the mix it spans: off at batch 60 says little of the plain step at 220."""
    weight = 0.0
    for key, (_, _, cell_weight) in cost.cells.items():
        span = cell_span(key)
        if span is None or not (plain_decode(key) or cell_k(key) == 0):
            continue
        centre = (span[0] * span[1]) ** 0.5
        if centre / SUPPORT_FACTOR <= batch_size <= centre * SUPPORT_FACTOR:
            weight += cell_weight
    return weight >= MEASURED_WEIGHT


def _best_here(model: Model, tuning: TuningInput, current_dense: Sequence[int], distribution: Distribution,
               sizes: Sequence[int]) -> list[int]:
    """What `model` would run at today's batch sizes (`sizes`; the current K elsewhere): each one's best K,
    one K for all where schedules are not allowed, or speculation off where that beats it."""
    ks = tuning.allowed_ks()
    top = tuning.max_batch_size
    if tuning.allow_schedule:
        dense = list(current_dense)
        for b in sizes:
            dense[b] = max(ks, key=lambda k: (model.speed(b, k, speculative=True), -k))
    else:
        dense = [0] + [max((k for k in ks if k > 0), key=lambda k: goodput(model, [0] + [k] * top, distribution))] * top
    off = [0] * (top + 1)
    if 0 in ks and goodput(model, off, distribution) > goodput(model, dense, distribution) * (1 + KEEP_TOLERANCE):
        return off
    return dense


def _probe_towards(here: _Here, other: Model, target: int, separation: float, max_loss: float, *,
                   beyond: bool = False) -> tuple[DraftConfig, int, float] | None:
    """The unmeasured K on the doubted fit's side of today's, nearest its choice, that is cheap enough
    and telling (a K next to today's often predicts nearly the same step time under both fits).

    `beyond`: the doubted fit turns speculation off (`target` 0, below today's K), no K below is both cheap enough
    and telling, and the K just above today's is measured instead. At a peak a model drafter's K = 0 step still
    runs its first pass, so its window serves one token a request-step for most of a drafting step's time, and
    the two fits may price that step alike (both put most of it in the pass). One K more -- one more draft pass
    and B more drafted tokens, which the two fits split between the drafter and the target differently -- can
    tell them apart; further above costs more for each K. The bench's heavy-spikes
    (tests/unit/test_policy_probe_split.py): with K=1 alone measured at batch 204-210 the fit put a plain step 23%
    above the engine's and saw speculation off at -2% where it gains +13%; the fits priced K = 0 there 3.5% apart
    (4% tells them), K=2 more; a window of K=2 put the plain step within 7% and off at +13%.
    """
    if target == here.k_now or any(measured_k(here.model.cost, b, target) for b in here.sizes):
        return None  # the K it would choose is measured: the optimiser has decided with it
    k_now = here.k_now
    above = range(k_now + 1, (here.tuning.in_place_max_k or k_now) + 1)
    if beyond:
        return _first_telling(here, other, list(above)[:1], separation, max_loss)
    side = range(k_now) if target < k_now else above
    return _first_telling(here, other, sorted(side, key=lambda k: (abs(k - target), k)), separation, max_loss)


def _first_telling(here: _Here, other: Model, order: Sequence[int], separation: float,
                   max_loss: float) -> tuple[DraftConfig, int, float] | None:
    """The first K of `order` not measured at today's batch sizes whose window today's fit prices at a loss of
    at most `max_loss` and whose step time `other` predicts at least `separation` apart from today's fit."""
    model, tuning, sizes = here.model, here.tuning, here.sizes
    allowed = set(tuning.allowed_ks())  # 0 only with allowDisable
    for k in order:
        if k not in allowed or any(measured_k(model.cost, b, k) for b in sizes):
            continue
        dense = _probe_dense(tuning, here.current_dense, k, here.k_now, sizes[0], sizes[-1])
        if dense is None or dense == here.current_dense or _held(here.st, dense, tuning.max_batch_size, here.now):
            continue
        loss = goodput(model, dense, here.distribution) / here.before - 1
        apart = max(abs(other.served_step_time(b, k, True) / model.served_step_time(b, k, True) - 1) for b in sizes)
        if loss >= -max_loss and apart >= separation:
            return DraftConfig.from_dense(dense), k, loss
    return None


def _probe_dense(tuning: TuningInput, current_dense: Sequence[int], k: int, k_now: int, low: int,
                 high: int) -> list[int] | None:
    """`k` at today's batch sizes low..high, the current K elsewhere; None where that is no config in place."""
    top = tuning.max_batch_size
    if not tuning.allow_schedule:
        return [0] + [k] * top if k > 0 else None  # one K everywhere: K = 0 everywhere is no drafter
    dense = [*current_dense[:low], *([k] * (high - low + 1)), *current_dense[high + 1 :]]
    if not is_speculative(dense):
        # In place needs a drafter: keep today's K at the nearest batch size today's load does not reach.
        outside = high + 1 if high < top else low - 1
        if outside < 1:
            return None
        dense[outside] = k_now
    return dense


def _held(st: PolicyState, dense: Sequence[int], max_batch_size: int, now: float) -> bool:
    """Probed at these batch sizes with this K within the hold."""
    for entry in st.probed:
        if entry.until > now and entry.batch_sizes and all(
                dense[b] == entry.config.dense(max_batch_size)[b] for b in entry.batch_sizes if b < len(dense)):
            return True
    return False


def remember(st: PolicyState, probe: Probe, current: DraftConfig, tuning: TuningInput, now: float, *,
             acceptance: bool = False) -> None:
    """Not the same probe again within the hold, whatever its cell's memory does meanwhile; the record
    stays for PROBE_MEMORY_SECONDS more (the `doubted` guard, which a probe of the `acceptance` does not
    start); and the config it replaced, to go back to."""
    hold = max(tuning.reject_hold_seconds, MIN_HOLD_SECONDS)
    st.probed = [entry for entry in st.probed if entry.until + PROBE_MEMORY_SECONDS > now] + [
        ProbeRecord(config=probe.config, until=now + hold, batch_sizes=list(probe.batch_sizes),
                    acceptance=acceptance)]
    st.probe_from = current
