"""`specinfer bench tuner-table FILE...`: one markdown table of `specinfer bench tuner --json` runs.

Each file is one run (`--update-strategy`, `--seed`); the table puts, per scenario, the policy against the
per-phase oracle under Surge and under Replace with both signal sets (the worst seed), the oracle that pays
its way under each, the policy against vLLM alone (its adaptive verification at the best static K, or the
best static K where vLLM refuses it) over every run, and the rollouts. It is the table of
docs/performance.md's Tuner section.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import click

STRATEGIES = ("Surge", "Replace")
SIGNALS = ("specinfer", "vllm")


def _runs(paths: tuple[str, ...]) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = defaultdict(list)
    for path in paths:
        for name, report in json.loads(Path(path).read_text()).items():
            runs[name].append(report)
    return runs


def _worst(values: list[float]) -> str:
    return f"{min(values):.3f}" if values else "-"


def row(name: str, reports: list[dict], own: str) -> str:
    """One scenario's line of the table."""
    first = reports[0]
    in_place = first["inPlace"]
    cells = [name, f"{first['replicas']}, {own}, {first['reloadSeconds'] / 60:g} min",
             f"K={in_place['maxK']}" if in_place else "-- (rollouts)"]
    goals, references = [], []
    for strategy in STRATEGIES:
        runs = [r for r in reports if r["updateStrategy"] == strategy]
        values = []
        for signals in SIGNALS:
            checks = [r["goals"][signals]["vsOracle"] for r in runs]
            missed = sum(1 for c in checks if not c["met"])
            values.append(_worst([c["value"] for c in checks]) + (f" **{missed} missed**" if missed else ""))
        goal = max((r["goals"]["specinfer"]["vsOracle"]["goal"] for r in runs), default=None)
        goals.append(f"{', '.join(values)} ({goal})" if runs else "-")
        references.append(_worst([r["goals"]["specinfer"]["vsOracle"]["reference"] for r in runs]))
    cells += goals
    cells.append(", ".join(references))
    alone = [r["goals"][signals]["vsAdaptive"] for r in reports for signals in SIGNALS]
    missed = sum(1 for c in alone if not c["met"])
    competitor = next((k for k in first["results"] if k.startswith("adaptive verification")), None)
    best_static = next(k for k in first["results"] if k.startswith("best static"))
    cells.append(_worst([c["value"] for c in alone]) + (f" **{missed} missed**" if missed else "")
                 + ("" if competitor else " (refused: best static K)"))

    def share(contender: str | None) -> str:
        if contender is None:
            return "refused"
        ratios = [r["results"][k]["goodput"] / r["results"]["per-phase oracle"]["goodput"]
                  for r in reports for k in r["results"] if k.split(" (K=")[0] == contender.split(" (K=")[0]]
        return f"{contender.split('(')[1].rstrip(')')}: {sum(ratios) / len(ratios):.3f}"

    cells += [share(competitor), share(best_static)]
    restarts = max(r["results"][p]["restartsPerReplicaHour"] for r in reports
                   for p in ("policy", "policy (vLLM series only)"))
    cells.append(f"{restarts:.2f}")
    return "| " + " | ".join(cells) + " |"


HEADER = ("| scenario | replicas, own rollout, reload | in place up to | policy / per-phase oracle, Surge: plugin, "
          "vLLM (goal) | Replace: plugin, vLLM (goal) | oracle paying its way / per-phase oracle: Surge, Replace | "
          "policy / vLLM alone, every run (goal 1.0) | vLLM's adaptive verification at its best static K / oracle | "
          "best static K / oracle | rollouts per replica-hour, most |\n|---|---|---|---|---|---|---|---|---|---|")


@click.command("tuner-table")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def tuner_table_command(files: tuple[str, ...]) -> None:
    """One markdown table of `specinfer bench tuner --json` runs (each strategy and seed a file): the worst seed."""
    from .scenarios import SCENARIOS

    runs = _runs(files)
    click.echo(HEADER)
    for name, reports in runs.items():
        own = SCENARIOS[name].strategy if name in SCENARIOS else "?"
        click.echo(row(name, reports, own))
    seeds = sorted({r["seed"] for reports in runs.values() for r in reports})
    click.echo(f"\n{len(runs)} scenarios, seeds {', '.join(map(str, seeds))}: the worst seed of each figure")
