"""The tuning loop's PromQL, run by Prometheus's own evaluator (`promtool test rules`): every query parses, and
the prompt-token query counts what an engine computed -- prefix-cache hits left out where the engine reports
them, every prompt token where it does not (an engine without the cached counter)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from specinfer.operator.tuner.pure.queries import LabelMapping, build_queries
from tests.unit.test_monitoring_files import promtool

pytestmark = pytest.mark.unit

LABELS = LabelMapping()
WINDOW_SECONDS = 120


def rules_file(tmp_path, names=None):
    queries = [q for q in build_queries(LABELS, WINDOW_SECONDS) if names is None or q.name in names]
    path = tmp_path / "tuner.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "tuner", "rules": [
        {"record": f"tuner:{q.name}", "expr": q.promql} for q in queries]}]}))
    return path


def test_every_tuner_query_is_valid_promql(tmp_path):
    result = subprocess.run([promtool(), "check", "rules", str(rules_file(tmp_path))], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(build_queries(LABELS, WINDOW_SECONDS))} rules found" in result.stdout


def test_prompt_tokens_leave_out_the_cached_ones_where_the_engine_counts_them(tmp_path):
    rules = rules_file(tmp_path, {"promptTokens"})
    cached = '{namespace="ns", specinfer_io_name="cached", pod="p"}'
    plain = '{namespace="ns", specinfer_io_name="plain", pod="q"}'
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f"vllm:prompt_tokens_total{cached}", "values": "0+100x10"},
                {"series": f"vllm:prompt_tokens_cached_total{cached}", "values": "0+30x10"},
                {"series": f"vllm:prompt_tokens_total{plain}", "values": "0+100x10"},
            ],
            # over the 120 s window: 200 prompt tokens each, 60 of them cached on the first engine
            "promql_expr_test": [{"expr": "tuner:promptTokens", "eval_time": "5m", "exp_samples": [
                {"labels": 'tuner:promptTokens{namespace="ns", specinfer_io_name="cached"}', "value": 140},
                {"labels": 'tuner:promptTokens{namespace="ns", specinfer_io_name="plain"}', "value": 200},
            ]}],
        }],
    }))
    result = subprocess.run([promtool(), "test", "rules", str(tests)], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
