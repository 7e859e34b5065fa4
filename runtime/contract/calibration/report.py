"""What `specinfer calibrate` prints: the measured table, the comparison, and the same as JSON. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specinfer.api.calibration import BASELINE, CONFIGURED, CalibrationRecommendation, CandidateComparison
from specinfer.runtime.contract.calibration.analysis import CandidateResult, compare, step_cost_cells
from specinfer.runtime.contract.calibration.measurement import Measurement, acceptance_rows


@dataclass(frozen=True)
class Endpoint:
    """One measured server: the name you gave it, its URL and what it measured (one K per server)."""

    name: str
    url: str
    measurements: tuple[Measurement, ...]

    @property
    def k(self) -> int:
        return self.measurements[0].k if self.measurements else 0


def candidates(endpoints: Sequence[Endpoint]) -> tuple[list[CandidateResult], str | None]:
    """Endpoints grouped by name (several K of one method = several endpoints with one name). The first name is
    the reference ("configured"); the endpoints without speculation are the baseline. Returns the candidates and,
    when there is nothing to compare with, why."""
    names = list(dict.fromkeys(e.name for e in endpoints))
    baseline = [e for e in endpoints if e.k == 0]
    if not baseline:
        return [], "no endpoint runs without speculation: add one (-e none=URL) to compare methods"
    results = [CandidateResult(name=BASELINE, method="none",
                               points=tuple(m.point() for e in baseline for m in e.measurements))]
    for index, name in enumerate(names):
        mine = [e for e in endpoints if e.name == name and e.k > 0]
        if mine:
            results.append(CandidateResult(name=CONFIGURED if index == 0 else name.lower(), method=name,
                                           points=tuple(m.point() for e in mine for m in e.measurements)))
    return results, None


def comparison(endpoints: Sequence[Endpoint]) -> tuple[list[CandidateComparison], CalibrationRecommendation | None,
                                                         str | None]:
    results, problem = candidates(endpoints)
    if problem is not None:
        return [], None, problem
    reference = next((r.method for r in results if r.name == CONFIGURED), "none")
    rows, recommendation = compare(results, configured_method=reference)
    return rows, recommendation, None


def table(endpoints: Sequence[Endpoint]) -> str:
    header = ("| endpoint | K | batch | mean batch | step ms | tokens/step | tokens/s | acceptance per position |\n"
              "|---|---:|---:|---:|---:|---:|---:|---|")
    lines = [header]
    for endpoint in endpoints:
        acceptance = {row.num_speculative_tokens: row for row in acceptance_rows(endpoint.measurements)}
        for m in sorted(endpoint.measurements, key=lambda m: m.batch_size):
            row = acceptance.get(m.k)
            per_position = ", ".join(f"{p:.2f}" for p in row.per_position) if row and row.drafts else "-"
            lines.append(f"| {endpoint.name} | {m.k} | {m.batch_size} | {m.mean_batch_size:.1f} | "
                         f"{1000 * m.step_seconds:.2f} | {m.tokens_per_step:.2f} | {m.tokens_per_second:,.1f} | "
                         f"{per_position} |")
    return "\n".join(lines)


def text_report(endpoints: Sequence[Endpoint]) -> str:
    rows, recommendation, problem = comparison(endpoints)
    out = [table(endpoints), ""]
    if problem is not None:
        out.append(problem)
        return "\n".join(out)
    out.append("| candidate | best K by batch size | speed-up vs none | vs reference |\n|---|---|---:|---:|")
    for row in rows:
        ks = ", ".join(f"{b.batch_size}: K={b.num_speculative_tokens}" for b in row.best)
        label = f"{row.method} (reference)" if row.name == CONFIGURED else row.method
        out.append(f"| {label} | {ks} | {row.speedup_vs_none:.2f}x | {row.gain_vs_configured:+.1%} |")
    assert recommendation is not None
    out += ["", recommendation.message]
    return "\n".join(out)


def json_report(endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    rows, recommendation, problem = comparison(endpoints)
    reference = endpoints[0].name if endpoints else None
    configured = [m.point() for e in endpoints if e.name == reference and e.k > 0 for m in e.measurements]
    baseline = [m.point() for e in endpoints if e.k == 0 for m in e.measurements]
    return {
        "endpoints": [{"name": e.name, "url": e.url, "numSpeculativeTokens": e.k,
                       "points": [m.point().to_json() for m in e.measurements],
                       "acceptance": [row.to_json() for row in acceptance_rows(e.measurements)]} for e in endpoints],
        "stepCost": {"reference": reference,
                     "cells": [cell.to_json() for cell in step_cost_cells(configured, baseline)]},
        "comparison": [row.to_json() for row in rows],
        "recommendation": recommendation.to_json() if recommendation else None,
        "problem": problem,
    }
