"""`specinfer monitoring`: write the Grafana dashboard and the alerting rules into the chart.

    specinfer monitoring            # charts/specinfer/files/{grafana-dashboard.json,prometheus-rules.yaml}
    specinfer monitoring --check    # exit 1 if the committed files differ (CI, tests/unit/test_monitoring_files.py)
    specinfer monitoring --namespace-label kubernetes_namespace --resource-label app -o out/
                                    # for a Prometheus that relabels the engine pods differently
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from specinfer.monitoring.panels import DEFAULT_LABELS, Labels

CHART_FILES = Path("charts") / "specinfer" / "files"
DASHBOARD_FILE = "grafana-dashboard.json"
RULES_FILE = "prometheus-rules.yaml"


def generated(labels: Labels = DEFAULT_LABELS) -> dict[str, str]:
    """File name -> content."""
    from specinfer.monitoring.alerts import render_rules
    from specinfer.monitoring.dashboard import render_dashboard

    return {DASHBOARD_FILE: render_dashboard(labels), RULES_FILE: render_rules(labels)}


def stale_files(directory: Path, labels: Labels = DEFAULT_LABELS) -> list[str]:
    return [name for name, text in generated(labels).items()
            if not (directory / name).exists() or (directory / name).read_text() != text]


@click.command("monitoring")
@click.option("--output", "-o", "directory", type=click.Path(file_okay=False, path_type=Path), default=CHART_FILES,
              show_default=True, help="Folder to write the dashboard and the rules file into.")
@click.option("--namespace-label", default=Labels.namespace, show_default=True,
              help="Prometheus label with the engine pods' namespace (operator configuration tuning.labels).")
@click.option("--resource-label", default=Labels.resource, show_default=True,
              help="Prometheus label with the SpeculativeInference name (operator configuration tuning.labels).")
@click.option("--check", is_flag=True, help="Do not write; exit 1 if the files differ from the generators.")
def monitoring_command(directory: Path, namespace_label: str, resource_label: str, check: bool) -> None:
    """Generate the Grafana dashboard and the Prometheus alerting rules (shipped by the Helm chart)."""
    labels = Labels(namespace=namespace_label, resource=resource_label)
    if check:
        stale = stale_files(directory, labels)
        if stale:
            click.echo(f"{', '.join(stale)} in {directory} out of date: run `specinfer monitoring`", err=True)
            sys.exit(1)
        click.echo(f"{DASHBOARD_FILE} and {RULES_FILE} in {directory} are up to date")
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in generated(labels).items():
        (directory / name).write_text(text)
        click.echo(f"wrote {directory / name}")
