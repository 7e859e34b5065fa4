"""The dashboard as a PNG, drawn with matplotlib from the same panels' PromQL over a real run.

No Grafana server runs here, so the README's picture is this: every panel of panels.py, laid out
as the Grafana dashboard lays them out (rows of three), each query evaluated as a range query
against the run's Prometheus. tests/integration/test_monitoring_live.py draws it at the end of its run
(SPECINFER_DASHBOARD_PNG=docs/img/dashboard.png keeps it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from prometheus_api_client import PrometheusConnect

from specinfer.monitoring.panels import Panel, panels, resolve

COLUMNS = 3


@dataclass(frozen=True)
class Line:
    label: str
    times: list[float]  # seconds since the start of the window
    values: list[float]


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat: {{label}} replaced by the series' label value."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def panel_lines(client: PrometheusConnect, panel: Panel, *, namespace: str, resource: str, start: float,
                end: float, step: float, rate_interval: str) -> list[Line]:
    lines = []
    for query in panel.queries:
        result = client.custom_query_range(
            resolve(query.expr, namespace=namespace, resource=resource, rate_interval=rate_interval),
            start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(end, UTC),
            step=f"{step:g}s")
        for series in result:
            points = [(float(t) - start, float(v)) for t, v in series["values"]]
            finite = [(t, v) for t, v in points if math.isfinite(v)]
            if finite:
                lines.append(Line(legend(query.legend, series["metric"]), [t for t, _ in finite],
                                  [v for _, v in finite]))
    return lines


def write_picture(prometheus_url: str, path: Path, *, namespace: str, resource: str, start: float, end: float,
                  step: float = 5.0, rate_interval: str = "30s", title: str = "specinfer dashboard") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    client = PrometheusConnect(url=prometheus_url, disable_ssl=True)
    shown = panels()
    rows = math.ceil(len(shown) / COLUMNS)
    figure, axes = plt.subplots(rows, COLUMNS, figsize=(5.2 * COLUMNS, 3.1 * rows), squeeze=False)
    for index, panel in enumerate(shown):
        axis = axes[index // COLUMNS][index % COLUMNS]
        lines = panel_lines(client, panel, namespace=namespace, resource=resource, start=start, end=end,
                            step=step, rate_interval=rate_interval)
        for line in sorted(lines, key=lambda item: item.label):
            minutes = [t / 60 for t in line.times]
            if panel.kind == "statetimeline" or "K in force" in panel.title or "Restarts" in panel.title:
                axis.step(minutes, line.values, where="post", label=line.label)
            else:
                axis.plot(minutes, line.values, label=line.label, linewidth=1.2)
        for value, colour in panel.thresholds:
            axis.axhline(value, color=colour, linestyle="--", linewidth=0.8)
        axis.set_title(f"{panel.row}: {panel.title}", fontsize=9)
        axis.tick_params(labelsize=7)
        if panel.unit == "percentunit":
            axis.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        if lines:
            axis.legend(fontsize=6, loc="best")
        else:
            axis.text(0.5, 0.5, "no data", ha="center", va="center", transform=axis.transAxes, color="grey")
        if index // COLUMNS == rows - 1 or index + COLUMNS >= len(shown):
            axis.set_xlabel("minutes", fontsize=7)
    for index in range(len(shown), rows * COLUMNS):
        axes[index // COLUMNS][index % COLUMNS].axis("off")
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
