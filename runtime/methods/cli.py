"""`specinfer methods`: the method x accelerator catalogue, as a table or as JSON."""

from __future__ import annotations

import json

import click

from specinfer.runtime.methods import ACCELERATORS, MethodSpec, all_methods
from specinfer.runtime.methods.engine_truth import schedule_support


def _k_range(method: MethodSpec) -> str:
    return "0" if method.k_max == 0 else f"{method.k_min}-{method.k_max} ({method.k_default})"


def methods_table() -> str:
    header = ["METHOD", "VLLM METHOD", "DRAFT MODEL", "DRAFTER", "DRAFT COST", "K (DEFAULT)",
              *(a.upper() for a in ACCELERATORS)]
    rows = [header]
    for method in all_methods():
        cells = [
            method.name,
            method.vllm_method or "-",
            method.draft_model,
            method.drafter or "-",
            method.cost_shape or "-",
            _k_range(method),
        ]
        for accelerator in ACCELERATORS:
            support = method.accelerators.get(accelerator)
            cells.append("-" if support is None else ("yes*" if support.caveats or support.engine_args else "yes"))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    notes = []
    for method in all_methods():
        for accelerator, support in method.accelerators.items():
            for caveat in support.caveats:
                notes.append(f"  {method.name} on {accelerator}: {caveat}")
            if support.engine_args:
                notes.append(f"  {method.name} on {accelerator}: adds `{' '.join(support.engine_args)}`")
    engines = [
        f"  {a.name}: {a.engine.label}, Model Runner {a.default_model_runner.upper()}"
        + (f", K <= {a.max_k} ({a.max_k_reason})" if a.max_k is not None else "")
        for a in ACCELERATORS.values()
    ]
    return "\n".join([*lines, "", "yes* = supported with caveats; - = not supported:", *notes,
                      "engines (release, default model runner, K cap):", *engines,
                      "Dynamic SD schedule not kept by vLLM (refused at admission):", *_unscheduled()])


def _unscheduled() -> list[str]:
    """Method x accelerator pairs whose schedule vLLM drops or crashes on, grouped by what happens."""
    groups: dict[tuple[str, str], list[str]] = {}
    for method in all_methods():
        for accelerator in method.accelerators:
            verdict = schedule_support(method.name, accelerator)
            if method.speculates and not verdict.honoured:
                release = ACCELERATORS[accelerator].engine.label
                key = (method.name, f"{release} {verdict.effect} ({verdict.source})")
                groups.setdefault(key, []).append(accelerator)
    return [f"  {method} on {', '.join(accelerators)}: {effect}" for (method, effect), accelerators in groups.items()]


@click.command("methods")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of method objects.")
def methods_command(as_json: bool) -> None:
    """List speculative-decoding methods, their K bounds, hardware support and engine releases."""
    if as_json:
        click.echo(json.dumps([method.to_dict() for method in all_methods()], indent=2))
    else:
        click.echo(methods_table())
