"""`specinfer bench selection`: method auto's selection policy in closed loop against the simulator's model.

Minute by minute the traffic follows the scenario's phases (workload and concurrency); the real
`operator/selection/policy.py` decides on what the operator would see (status.metrics: the mean
batch size and the serving method's acceptance), and its comparisons are played as calibrations
would run them: one engine per candidate started one after the other (the preset's reload time
each) and measured at every batch size for the load's warm-up + duration, on prompts like the
traffic's at that time; the speedups they report come from the simulator's model (the same
acceptance profiles and step costs the simulator engine plays). A chosen method rolls out with
Surge (the old pod serves until the new one is ready: no goodput lost).

Within a method, K is what the K / schedule tuner would find (the best K for the phase): this
benchmark measures the choice of method, `specinfer bench tuner` the choice of K. The oracle knows
the best method of every phase and switches for free. Goal (issue 24): goodput >= 0.9x the oracle.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import click

from specinfer.api import parse_spec
from specinfer.api.auto import candidates_of
from specinfer.api.calibration import SpeculativeInferenceCalibrationSpec
from specinfer.api.speculation import AutoCandidate
from specinfer.api.status import MetricsStatus, SelectionStatus
from specinfer.api.timestamps import rfc3339
from specinfer.operator.selection.pure.policy import World, candidate_k, serving_candidate, step
from specinfer.runtime.methods import cost_model, draft_scale, get_method
from specinfer.runtime.sim.model import acceptance_profile

START = 1_800_000_000.0
GOAL = 0.9
K_RANGE = range(1, 9)


@dataclass(frozen=True)
class Phase:
    name: str
    minutes: int
    workload: str
    concurrency: int


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    phases: tuple[Phase, ...]
    candidates: tuple[dict, ...]
    cost_preset: str = "h100-llama8b"
    reselect_seconds: int = 1800
    initial: str = "none"


SCENARIOS = {s.name: s for s in (
    Scenario("rag-chat-rag", "RAG (n-gram wins) for 90 minutes, open chat (EAGLE-3 wins) for 90, RAG again; "
             "4 requests in flight; candidates ngram and an EAGLE-3 head",
             (Phase("rag", 90, "summarization", 4), Phase("chat", 90, "chat", 4),
              Phase("rag again", 90, "summarization", 4)),
             ({"method": "ngram", "numSpeculativeTokens": 4},
              {"method": "eagle3", "draftModel": {"name": "bench/eagle3-head"}, "numSpeculativeTokens": 3})),
)}


def goodput(preset: str, method: str, workload: str, batch: int, k: int | None) -> float:
    """Generated tokens per second at `batch` requests in flight; k None: the best K (what the K tuner finds)."""
    cm, spec = cost_model(preset), get_method(method)
    if not spec.speculates:
        return batch / cm.step_time(batch, 0, None)
    profile = acceptance_profile(method, workload)

    def at(k: int) -> float:
        return batch * profile.expected_tokens(k) / cm.step_time(batch, k, spec.cost_shape,
                                                                 draft_scale=draft_scale(method), speculative=True)
    return max(at(k) for k in K_RANGE) if k is None else at(k)


def comparison_seconds(spec: SpeculativeInferenceCalibrationSpec, preset: str, speculating_now: bool) -> float:
    """One engine per candidate and K (plus the one serving and no speculation), one after the other."""
    engines = sum(len(c.num_speculative_tokens or [1]) for c in spec.candidates) + 1 + int(speculating_now)
    per_point = spec.load.warmup_seconds + spec.load.duration_seconds
    return engines * (cost_model(preset).restart_s + per_point * len(spec.batch_sizes))


def measured_comparison(scenario: Scenario, calibration: SpeculativeInferenceCalibrationSpec,
                        serving: tuple[str, str, int], workload: str) -> list[dict]:
    """What the calibration's status.comparison would say: each candidate's speedup over no speculation at
    the K it is measured at (geometric mean over the batch sizes)."""
    rows = [(c.name or c.speculation.method.lower(), c.speculation.method, (c.num_speculative_tokens or [1])[0])
            for c in calibration.candidates]
    if get_method(serving[1]).speculates:
        rows.append(("configured", serving[1], serving[2]))
    out = [{"name": "none", "method": "none", "speedupVsNone": 1.0, "gainVsConfigured": 0.0}]
    for name, method, k in rows:
        ratios = [goodput(scenario.cost_preset, method, workload, b, k) / goodput(scenario.cost_preset, "none",
                                                                                   workload, b, 0)
                  for b in calibration.batch_sizes]
        speedup = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        out.append({"name": name, "method": method, "speedupVsNone": round(speedup, 4), "gainVsConfigured": 0.0})
    return out


@dataclass
class InFlight:
    """A comparison the policy started: what it measures, on which traffic, and when it is done."""

    spec: SpeculativeInferenceCalibrationSpec
    workload: str
    done_at: float
    body: dict  # the SpeculativeInferenceCalibration as the controller's cache holds it


@dataclass
class Run:
    minutes: list[dict] = field(default_factory=list)
    switches: list[tuple[int, str, str]] = field(default_factory=list)   # (minute, from, to)
    comparisons: int = 0


def run(scenario: Scenario) -> Run:
    spec = parse_spec({
        "model": {"name": "bench/target"}, "hardware": {"accelerator": "nvidia"},
        "runtime": {"engine": "simulator", "simulator": {"costModel": scenario.cost_preset}},
        "speculation": {"method": "auto", "candidates": list(scenario.candidates), "initial": scenario.initial,
                        "reselectIntervalSeconds": scenario.reselect_seconds},
        "tuning": {"mode": "auto"}})
    accelerator = spec.hardware.accelerator
    selection, flight = SelectionStatus(), None
    result = Run()
    minute = 0
    pods = serving_candidate(spec, selection)  # what the engine pods run (a rollout takes the reload time)
    rollout: tuple[float, AutoCandidate] | None = None
    for phase in scenario.phases:
        for _ in range(phase.minutes):
            now = START + 60 * minute
            if rollout is not None and now >= rollout[0]:
                pods, rollout = rollout[1], None
            method = pods.method
            k = pods.num_speculative_tokens or get_method(method).default_k(accelerator)
            # the tuner's window: vLLM's per-position rates of the method the pods run, on the traffic now
            # and the speed each request got, which a switch is verified by
            live = goodput(scenario.cost_preset, method, phase.workload, phase.concurrency, None) / phase.concurrency
            metrics = MetricsStatus(mean_batch_size=float(phase.concurrency), sampled_at=rfc3339(now),
                                    tokens_per_request_second=live,
                                    per_position_acceptance=acceptance_profile(method, phase.workload)
                                    .prefix_probs(k) if get_method(method).speculates else None)
            if flight is not None and now >= flight.done_at and flight.body["status"]["phase"] == "Running":
                serving = serving_candidate(spec, selection)
                own = (serving.display_name(), serving.method, candidate_k(serving, accelerator))
                comparison = measured_comparison(scenario, flight.spec, own, flight.workload)
                flight.body["status"] = {"phase": "Succeeded", "comparison": comparison}
            outcome = step(World(name="bench", spec=spec, selection=selection, metrics=metrics, now=now,
                                 effective_method=method, calibration=flight.body if flight is not None else None))
            if outcome.create is not None:
                name, calibration_spec = outcome.create
                result.comparisons += 1
                flight = InFlight(calibration_spec, phase.workload,
                                  now + comparison_seconds(calibration_spec, scenario.cost_preset,
                                                           get_method(method).speculates),
                                  {"metadata": {"name": name, "creationTimestamp": rfc3339(now)},
                                   "spec": {"batchSizes": calibration_spec.batch_sizes},
                                   "status": {"phase": "Running"}})
            before = serving_candidate(spec, selection).display_name()
            selection = outcome.selection
            chosen = serving_candidate(spec, selection)
            if chosen.display_name() != before:
                result.switches.append((minute, before, chosen.display_name()))
                # Surge: the old pod serves until the new one has loaded the model
                rollout = (now + cost_model(scenario.cost_preset).restart_s, chosen)
            served = goodput(scenario.cost_preset, method, phase.workload, phase.concurrency, None)
            best = max(goodput(scenario.cost_preset, c.method, phase.workload, phase.concurrency, None)
                       for c in candidates_of(spec))
            result.minutes.append({"minute": minute, "phase": phase.name, "serving": pods.display_name(),
                                   "goodput": served, "oracle": best})
            minute += 1
    return result


def report(scenario: Scenario, result: Run) -> dict:
    total = sum(m["goodput"] for m in result.minutes)
    oracle = sum(m["oracle"] for m in result.minutes)
    phases: dict[str, dict] = {}
    for m in result.minutes:
        entry = phases.setdefault(m["phase"], {"goodput": 0.0, "oracle": 0.0, "served": {}})
        entry["goodput"] += m["goodput"]
        entry["oracle"] += m["oracle"]
        entry["served"][m["serving"]] = entry["served"].get(m["serving"], 0) + 1
    return {"scenario": scenario.name, "description": scenario.description,
            "vs_oracle": round(total / oracle, 4), "goal": GOAL, "met": total / oracle >= GOAL,
            "comparisons": result.comparisons, "switches": result.switches,
            "phases": {name: {"vs_oracle": round(p["goodput"] / p["oracle"], 4), "minutes_served": p["served"]}
                       for name, p in phases.items()}}


@click.command("selection")
@click.option("--scenario", "names", multiple=True, type=click.Choice(sorted(SCENARIOS)),
              help="Scenario to run (repeatable); default: all.")
@click.option("--initial", type=click.Choice(["none", "first"]), default=None,
              help="Override the scenario's spec.speculation.initial.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def selection_command(names: tuple[str, ...], initial: str | None, as_json: bool) -> None:
    """Method auto against the simulator's model: goodput versus a per-phase oracle, switches, comparisons."""
    reports = []
    for name in names or tuple(SCENARIOS):
        scenario = SCENARIOS[name]
        if initial is not None:
            scenario = Scenario(**{**scenario.__dict__, "initial": initial})
        reports.append(report(scenario, run(scenario)))
    if as_json:
        click.echo(json.dumps(reports, indent=2))
        return
    for r in reports:
        click.echo(f"{r['scenario']}: {r['description']}")
        click.echo(f"  goodput {r['vs_oracle']:.3f}x the per-phase oracle (goal >= {r['goal']}: "
                   f"{'met' if r['met'] else 'MISSED'}); {r['comparisons']} comparisons; switches: "
                   + ", ".join(f"minute {m}: {a} -> {b}" for m, a, b in r["switches"]))
        for phase, p in r["phases"].items():
            served = ", ".join(f"{k} {v} min" for k, v in p["minutes_served"].items())
            click.echo(f"    {phase:<10} {p['vs_oracle']:.3f}x oracle; served {served}")
