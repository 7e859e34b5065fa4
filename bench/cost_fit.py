"""`specinfer bench cost-fit`: fit a simulator step-cost preset to `specinfer bench engine-cpu` measurements.

The simulator's T(B, K) (runtime/methods/cost_presets.py) is a smooth roofline over the B*(K+1)
verified tokens, plus a KV read per sequence, plus the drafting cost: K sequential draft passes
(draft models, weighed by the method's draft_scale) or an n-gram lookup per drafted token. Given
the knee -- the floor, the slope per token and the sharpness -- every other term is linear, so
the fit searches the knee on a grid and solves the rest by non-negative least squares on relative
errors (a 10% miss at 3 ms weighs as much as one at 60 ms). Pure: measurements in, preset out.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from specinfer.runtime.methods import get_method
from specinfer.runtime.methods.cost_presets import CostModel, CostShape, cost_model
from specinfer.runtime.methods.registry import draft_scale

# The bench's method names -> the catalogue's
CATALOGUE_NAMES = {"draft_model": "draftModel", "ngram": "ngram", "none": "none"}
FLOORS = np.geomspace(0.0005, 0.05, 41)             # seconds
SLOPES = np.geomspace(1e-6, 2e-3, 49)               # seconds per verified token
SHARPNESS = (1.0, 1.5, 2.0, 3.0, 4.0)


@dataclass(frozen=True)
class Point:
    """One measured engine step: method, K, batch size and mean step seconds."""

    method: str
    k: int
    batch: int
    seconds: float

    @property
    def cost_shape(self) -> CostShape | None:
        return get_method(CATALOGUE_NAMES[self.method]).cost_shape if self.k else None

    @property
    def scale(self) -> float:
        return draft_scale(CATALOGUE_NAMES[self.method])


def points(rows: Sequence[dict]) -> list[Point]:
    """The bench's rows (`--json-out`) as step times: wall time / engine steps."""
    return [Point(r["method"], r["k"], r["batch"], r["wall_s"] / r["steps"]) for r in rows if r.get("steps")]


def fastest(measured: Sequence[Point]) -> list[Point]:
    """One point per (method, K, batch): the shortest step time over repeated runs. On shared cores
    other processes only ever add time, so the minimum is the engine's own cost."""
    best: dict[tuple[str, int, int], Point] = {}
    for point in measured:
        key = (point.method, point.k, point.batch)
        if key not in best or point.seconds < best[key].seconds:
            best[key] = point
    return [best[key] for key in sorted(best, key=lambda key: (key[0] != "none", key))]


LINEAR = ("kv_per_seq_s", "draft_pass_s", "draft_per_token_s", "lookup_per_token_s", "speculation_step_s",
          "speculation_per_seq_s")


def _linear_terms(point: Point) -> list[float]:
    """Coefficients of the LINEAR fields in T(B, K)."""
    b, k = point.batch, point.k
    speculating = [1.0, float(b)] if k > 0 else [0.0, 0.0]
    if point.cost_shape == "sequential":
        return [b, point.scale * k, point.scale * k * b, 0.0, *speculating]
    if point.cost_shape == "lookup" and k > 0:  # n-gram, suffix: lookup per drafted token
        return [b, 0.0, 0.0, b * k, *speculating]
    return [b, 0.0, 0.0, 0.0, *speculating]


def _roof(floor: float, slope: float, sharpness: float, tokens: np.ndarray) -> np.ndarray:
    return (floor**sharpness + (slope * tokens) ** sharpness) ** (1.0 / sharpness)


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (a cost term never saves time): drop the negative
    ones and solve again until none is left (few columns, so the simple active set suffices)."""
    active = np.ones(a.shape[1], dtype=bool)
    x = np.zeros(a.shape[1])
    for _ in range(a.shape[1]):
        x[:] = 0.0
        x[active] = np.linalg.lstsq(a[:, active], y, rcond=None)[0] if active.any() else []
        if (x >= 0).all():
            return x
        active &= x > 0
    return np.maximum(x, 0.0)


def fit(measured: Sequence[Point], like: CostModel) -> CostModel:
    """The preset (named and restarting like `like`) that fits `measured` best."""
    seconds = np.array([p.seconds for p in measured])
    tokens = np.array([p.batch * (p.k + 1) for p in measured], dtype=float)
    linear = np.array([_linear_terms(p) for p in measured]) / seconds[:, None]
    best: tuple[float, CostModel] | None = None
    for floor, slope, sharpness in itertools.product(FLOORS, SLOPES, SHARPNESS):
        roof = _roof(floor, slope, sharpness, tokens)
        rest = _nnls(linear, 1.0 - roof / seconds)
        error = float(np.sum((roof / seconds + linear @ rest - 1.0) ** 2))
        if best is None or error < best[0]:
            linear_fields = dict(zip(LINEAR, (float(v) for v in rest), strict=True))
            draft_pass = linear_fields["draft_pass_s"]
            changes: dict[str, Any] = {
                **linear_fields, "floor_s": float(floor), "compute_per_token_s": float(slope),
                "knee_sharpness": sharpness,
                # not measured by the bench: a prompt token costs what a verified token does, and a
                # parallel drafter's pass keeps its ratio to a sequential pass
                "prefill_per_token_s": float(slope),
                "parallel_pass_s": draft_pass * like.parallel_pass_s / like.draft_pass_s if like.draft_pass_s else 0.0}
            best = (error, dataclasses.replace(like, **changes))
    assert best is not None
    return best[1]


def simulated(model: CostModel, point: Point) -> float:
    return model.step_time(point.batch, point.k, point.cost_shape, draft_scale=point.scale)


def comparison(measured: Sequence[Point], model: CostModel) -> str:
    """Real vs simulated step time per point, with the relative error, as a Markdown table."""
    lines = [f"| method | K | batch | real ms | {model.name} ms | error |", "|---|---:|---:|---:|---:|---:|"]
    for p in measured:
        sim = simulated(model, p)
        lines.append(f"| {p.method} | {p.k} | {p.batch} | {1000 * p.seconds:.1f} | {1000 * sim:.1f} | "
                     f"{sim / p.seconds - 1:+.0%} |")
    errors = [abs(simulated(model, p) / p.seconds - 1) for p in measured]
    within = sum(e <= 0.15 for e in errors)
    lines.append(f"\n{within} of {len(errors)} points within 15%; median error {np.median(errors):.0%}, "
                 f"largest {max(errors):.0%}")
    return "\n".join(lines)


def preset_source(model: CostModel) -> str:
    """The fitted preset as it would be written in cost_presets.py."""
    fields = ("floor_s", "compute_per_token_s", "kv_per_seq_s", "draft_pass_s", "draft_per_token_s",
              "parallel_pass_s", "lookup_per_token_s", "prefill_per_token_s", "restart_s", "knee_sharpness",
              "speculation_step_s", "speculation_per_seq_s")
    body = "\n".join(f"    {name}={getattr(model, name):.3g}," for name in fields)
    return f'CostModel(\n    name="{model.name}",\n{body}\n)'


@click.command("cost-fit")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--preset", default="cpu-tiny", show_default=True,
              help="the preset to refit (its name, prefill, restart and parallel-pass terms are kept)")
def cost_fit_command(runs: tuple[Path, ...], preset: str) -> None:
    """Fit a step-cost preset to `specinfer bench engine-cpu --json-out` runs (several: the fastest of each point)."""
    measured = fastest([p for run in runs for p in points(json.loads(run.read_text()))])
    current = cost_model(preset)
    fitted = fit(measured, current)
    click.echo(f"today's {preset}:\n{comparison(measured, current)}\n")
    click.echo(f"fitted:\n{comparison(measured, fitted)}\n\n{preset_source(fitted)}")
