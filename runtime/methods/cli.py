"""`specinfer methods`: the method x accelerator catalogue, as a table or as JSON."""

from __future__ import annotations

import json

import click

from specinfer.runtime.methods import ACCELERATORS, RELEASES, MethodSpec, all_methods
from specinfer.runtime.methods.accelerators import EVIDENCE_MEANING
from specinfer.runtime.methods.drafting import ZERO_STEP_MEANING, Drafting, drafting_key
from specinfer.runtime.methods.engine_truth import schedule_support, why_not_offered
from specinfer.runtime.methods.engines import EngineRelease, SourceLine


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
    lines = _aligned(rows)
    notes = []
    for method in all_methods():
        for accelerator, support in method.accelerators.items():
            for caveat in support.caveats:
                notes.append(f"  {method.name} on {accelerator}: {caveat}")
            if support.engine_args:
                notes.append(f"  {method.name} on {accelerator}: adds `{' '.join(support.engine_args)}`")
        for name, platform in ACCELERATORS.items():
            if name not in method.accelerators:
                notes.append(f"  {method.name} on {name}: not supported: {why_not_offered(method, platform)}")
    engines = [
        f"  {a.name}: {a.engine.label}, Model Runner {a.default_model_runner.upper()}"
        + (f", K <= {a.max_k} ({a.max_k_reason})" if a.max_k is not None else "")
        for a in ACCELERATORS.values()
    ]
    return "\n".join([*lines, "", "yes* = supported with caveats; - = not supported:", *notes,
                      "engines (release, default model runner, K cap):", *engines,
                      "Dynamic SD schedule not kept by vLLM (refused at admission):", *_unscheduled(),
                      "", *_evidence()])


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _evidence() -> list[str]:
    """What each supported cell rests on, and where to look."""
    rows = [["EVIDENCE", *(a.upper() for a in ACCELERATORS)]]
    where: dict[str, list[str]] = {}
    for method in all_methods():
        cells = [method.name]
        for accelerator in ACCELERATORS:
            support = method.accelerators.get(accelerator)
            cells.append("-" if support is None else support.evidence.kind)
            if support is not None and support.evidence.kind != "source":
                for place in support.evidence.where:
                    where.setdefault(f"{support.evidence.kind}: {place}", []).append(f"{method.name} on {accelerator}")
        rows.append(cells)
    legend = [f"  {kind} = {meaning}" for kind, meaning in EVIDENCE_MEANING.items()]
    places = [f"  {place} ({', '.join(cells)})" for place, cells in where.items()]
    return [*_aligned(rows), "", *legend, "where:", *places]


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


def _at(text: str, line: SourceLine | None) -> str:
    return f"{text} (`{line}`)" if line is not None else text


def drafting_table() -> str:
    """What each drafter does with the per-step K, per method, engine release and model runner: a markdown
    table, every cell with the line it rests on (docs/engine-truth.md holds it)."""
    rows = ["| method | accelerators | engine, model runner | drafter | a step with K > 0 drafts | "
            "a K = 0 step runs | captured graphs | a Dynamic SD schedule |", "|---|---|---|---|---|---|---|---|"]
    for method in all_methods():
        for release in RELEASES:
            on = [name for name in method.accelerators if ACCELERATORS[name].engine is release]
            for runner in ("v2", "v1"):
                key = drafting_key(release, runner)
                if key not in method.drafting or not on:
                    continue
                default = [name for name in on if ACCELERATORS[name].default_model_runner == runner]
                where = ", ".join(default) if default else f"{', '.join(on)} (V1-only settings)"
                variants = [(method.drafting[key], where)]
                if key in method.single_module_drafting:  # the checkpoint's one MTP module, stated in the spec
                    variants.append((method.single_module_drafting[key], f"{where} (`mtpModules: 1`)"))
                rows += [_drafting_row(method, release, runner, fact, at, default) for fact, at in variants]
    return "\n".join(rows)


def _drafting_row(method: MethodSpec, release: EngineRelease, runner: str, fact: Drafting, where: str,
                  default: list[str]) -> str:
    drafts = "the scheduled K" if fact.drafted == "scheduled" else "the startup K, whatever the schedule"
    schedule = "-"
    if default:
        verdict = schedule_support(method.name, default[0])
        declared = method.schedule_on_v1_in(release)
        line = release.v2_truncates_drafts if runner == "v2" else (declared.source if declared else None)
        schedule = _at("verified" if verdict.honoured else verdict.effect, line)
        if verdict.piecewise_graphs:
            schedule += "; " + _at("full graphs downgraded to PIECEWISE", verdict.source)
    condition = f"; {fact.condition}" if fact.condition else ""
    zero = _at(ZERO_STEP_MEANING[fact.zero_step], fact.zero_source)
    return (f"| {method.name} | {where} | {release.label}, {runner.upper()} | `{fact.drafter}` | "
            f"{_at(drafts, fact.source)}{condition} | {zero} | {_at(fact.graphs, fact.graphs_source)} | {schedule} |")


@click.command("methods")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of method objects.")
@click.option("--drafting", is_flag=True, help="Print what each drafter does with the per-step K (markdown).")
def methods_command(as_json: bool, drafting: bool) -> None:
    """List speculative-decoding methods, their K bounds, hardware support and engine releases."""
    if as_json:
        click.echo(json.dumps([method.to_dict() for method in all_methods()], indent=2))
    elif drafting:
        click.echo(drafting_table())
    else:
        click.echo(methods_table())
