"""`specinfer tuner replay FILE`: decide recorded ticks again, offline, with today's policy."""

from __future__ import annotations

import json

import click

from specinfer.operator.tuner.recording import read_records, replay


@click.group("tuner")
def tuner() -> None:
    """The tuning policy, offline."""


@tuner.command("replay")
@click.argument("record_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--resource", default=None, help="only this resource (NAME or NAMESPACE/NAME)")
@click.option("--changes-only", is_flag=True, help="print only ticks where either decision changes the config")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per tick: recorded and replayed decisions")
def replay_command(record_file: str, resource: str | None, changes_only: bool, as_json: bool) -> None:
    """Run the policy over the ticks the operator recorded (operator configuration
    `tuning.recordFile`) and print what it decided then and decides now, tick by tick.
    Exit status 1 when any decision differs."""
    differ = 0
    for record in read_records(record_file, resource):
        result = replay(record)
        then, now = result.recorded, result.decision
        differ += not result.same
        if changes_only and then.get("action") == "keep" and now.get("action") == "keep":
            continue
        if as_json:
            click.echo(json.dumps({"namespace": record["namespace"], "name": record["name"], "now": record["now"],
                                   "recorded": then, "replayed": now}))
            continue
        mark = " " if result.same else "*"
        click.echo(f"{mark} {record['now']:.0f} {record['namespace']}/{record['name']} batch mean "
                   f"{record['observation']['batchSize']['mean']:.1f}")
        click.echo(f"    then: {then.get('action')}: {then.get('reason')}")
        if not result.same or now.get("reason") != then.get("reason"):
            click.echo(f"    now:  {now.get('action')}: {now.get('reason')}")
    if differ:
        raise SystemExit(1)
