"""The generated dashboard and alerting rules: committed copies up to date, valid for promtool, every
alert unit-tested by `promtool test rules`, every series they read exported by someone.

After changing src/specinfer/monitoring/: `specinfer monitoring` (then review the diff)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from specinfer.monitoring.alerts import build_rules
from specinfer.monitoring.cli import CHART_FILES, DASHBOARD_FILE, RULES_FILE, generated, stale_files
from specinfer.monitoring.dashboard import build_dashboard
from specinfer.monitoring.panels import Labels, panels, resolve
from specinfer.operator.plumbing import metrics
from specinfer.runtime.contract.telemetry import series as si
from specinfer.runtime.contract.telemetry import vllm_metrics as vm

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / CHART_FILES
PROMTOOL_TESTS = Path(__file__).parent / "promtool" / "specinfer-rules.test.yaml"
REQUIRED_PANELS = ("Acceptance per draft position", "Tokens per step", "K in force by batch size", "Goodput",
                   "p99 per-token latency", "Tuner changes", "Restarts in the past hour and the budget",
                   "TuningDegraded by reason", "Speed-up over no speculation (predicted)", "Cost per million tokens")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: Debian's prometheus package ships it (make setup installs it)")
    return path


def test_committed_files_are_what_the_generators_write():
    assert stale_files(FILES) == [], "run `specinfer monitoring` and commit charts/specinfer/files/"


def test_the_check_flag_fails_on_drift(tmp_path):
    from click.testing import CliRunner

    from specinfer.monitoring.cli import monitoring_command

    runner = CliRunner()
    assert runner.invoke(monitoring_command, ["-o", str(tmp_path)]).exit_code == 0
    assert runner.invoke(monitoring_command, ["-o", str(tmp_path), "--check"]).exit_code == 0
    (tmp_path / RULES_FILE).write_text((tmp_path / RULES_FILE).read_text().replace("0.55", "0.5"))
    result = runner.invoke(monitoring_command, ["-o", str(tmp_path), "--check"])
    assert result.exit_code == 1 and RULES_FILE in result.output


def test_promtool_accepts_the_rules_file():
    result = subprocess.run([promtool(), "check", "rules", str(FILES / RULES_FILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 6 rules found" in result.stdout


def test_promtool_unit_tests_of_every_alert_pass():
    result = subprocess.run([promtool(), "test", "rules", str(PROMTOOL_TESTS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", PROMTOOL_TESTS.read_text()))
    assert tested == {rule["alert"] for rule in build_rules()["groups"][0]["rules"]}


def test_every_panel_query_is_valid_promql(tmp_path):
    """promtool parses each resolved panel query (as a recording rule): a typo fails here, not in Grafana."""
    rules = [{"record": f"specinfer:panel_{i}_{j}", "expr": resolve(q.expr, namespace="ns", resource=".*")}
             for i, panel in enumerate(panels()) for j, q in enumerate(panel.queries)]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def exported_names() -> set[str]:
    """Every series name someone exports: vLLM, the stat-logger plugin, the operator."""
    names = {metric.series for metric in vars(vm).values() if isinstance(metric, vm.VllmMetric)}
    names |= {metric.name + suffix for metric in vars(vm).values() if isinstance(metric, vm.VllmMetric)
              for suffix in ("_bucket", "_sum", "_count")}
    names |= {s.promql for s in si.ALL_SERIES}
    for family in metrics.REGISTRY.collect():
        names |= {sample.name for sample in family.samples}
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def series_in(expr: str) -> set[str]:
    without_labels = re.sub(r"\{[^}]*\}", "", expr)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_labels)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_ranges))
    keywords = {"sum", "by", "rate", "max", "and", "histogram_quantile", "increase", "le", "on", "ignoring"}
    label_names = {"namespace", "name", "reason", "position", "batch_size", "action", "currency",
                   "specinfer_io_name", "specinfer_io_method"}
    return {w for w in words if w not in keywords and w not in label_names}


def test_every_series_the_dashboard_and_alerts_read_is_exported():
    exported = exported_names()
    exprs = [q.expr for panel in panels() for q in panel.queries]
    exprs += [rule["expr"] for rule in build_rules()["groups"][0]["rules"]]
    unknown = {name for expr in exprs for name in series_in(expr)} - exported
    assert unknown == set()


def test_dashboard_has_every_panel_the_issue_asks_for_and_filters_by_resource():
    dashboard = json.loads((FILES / DASHBOARD_FILE).read_text())
    titles = [p["title"] for p in dashboard["panels"] if p["type"] != "row"]
    assert set(REQUIRED_PANELS) <= set(titles)
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "namespace", "resource"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert 'namespace="$namespace"' in target["expr"], (panel["title"], target["expr"])
            assert '=~"$resource"' in target["expr"], (panel["title"], target["expr"])
            assert target["legendFormat"]


def test_label_names_follow_the_tuners_label_mapping():
    labels = Labels(namespace="kubernetes_namespace", resource="app")
    files = generated(labels)
    assert "specinfer_io_name" not in files[DASHBOARD_FILE] and "specinfer_io_name" not in files[RULES_FILE]
    assert 'kubernetes_namespace=\\"$namespace\\", app=~\\"$resource\\"' in files[DASHBOARD_FILE]
    assert "by (kubernetes_namespace, app)" in files[RULES_FILE]
    assert build_dashboard(labels)["templating"]["list"][2]["query"].endswith(", app)")
