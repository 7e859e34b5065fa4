"""Every series the simulator exports matches vLLM 0.33.0's: name, type, labels and buckets.

Reads the pinned wheel's source (vllm/v1/metrics/loggers.py, buckets.py and
vllm/v1/spec_decode/metrics.py) with `ast`; nothing of vLLM is imported.
"""

from __future__ import annotations

import ast

import pytest
from prometheus_client import CollectorRegistry

from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.sim.engine import FinishedStats, StepStats
from specinfer.runtime.sim.metrics import VllmMetrics

pytestmark = [pytest.mark.unit, pytest.mark.wheel]  # reads the pinned vLLM wheel

KIND_BY_CLS = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}


def _labels(node: ast.expr | None) -> list[str] | None:
    """labelnames=labelnames -> base labels; labelnames + ["x"] -> base + x; a literal list as is."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id == "labelnames":
        return ["model_name", "engine"]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_labels(node.left) or []) + (_labels(node.right) or [])
    if isinstance(node, ast.List):
        return [element.value for element in node.elts if isinstance(element, ast.Constant)]
    return None


def vllm_metric_table() -> dict[str, dict]:
    """name -> {"kind", "labels", "bucket_family"} from the wheel."""
    table: dict[str, dict] = {}
    loggers = ast.parse(read_source("vllm/v1/metrics/loggers.py"))
    bucket_family: dict[str, str] = {}
    for node in ast.walk(loggers):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Name) and func.id == "histogram_buckets" and isinstance(node.targets[0], ast.Name):
                bucket_family[node.targets[0].id] = node.value.args[0].value  # type: ignore[attr-defined]
    for node in ast.walk(loggers):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KIND_BY_CLS):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        name = keywords.get("name")
        if not isinstance(name, ast.Constant):
            continue
        buckets = keywords.get("buckets")
        table[name.value] = {
            "kind": KIND_BY_CLS[node.func.attr],
            "labels": _labels(keywords.get("labelnames")),
            "bucket_family": bucket_family.get(buckets.id) if isinstance(buckets, ast.Name) else None,
        }
    spec_source = read_source("vllm/v1/spec_decode/metrics.py")
    for name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens"):
        assert f'"{name}"' in spec_source, name
        table[name] = {"kind": "counter", "labels": ["model_name", "engine"], "bucket_family": None}
    assert 'name="vllm:spec_decode_num_accepted_tokens_per_pos"' in spec_source
    assert 'pos_labelnames = labelnames + ["position"]' in spec_source
    table["vllm:spec_decode_num_accepted_tokens_per_pos"] = {
        "kind": "counter", "labels": ["model_name", "engine", "position"], "bucket_family": None}
    return table


def vllm_buckets(family: str, max_model_len: int) -> list[float]:
    namespace: dict = {}
    exec(compile(read_source("vllm/v1/metrics/buckets.py"), "buckets.py", "exec"), namespace)  # pure module
    return [float(b) for b in namespace["histogram_buckets"](family, max_model_len=max_model_len)]


@pytest.fixture(scope="module")
def exported():
    registry = CollectorRegistry()
    metrics = VllmMetrics(registry, model_name="m", num_speculative_tokens=3, max_model_len=4096)
    finished = FinishedStats("length", 1.0, 0.1, 0.1, 0.8, 0.9, 0.2, 0.01, 10, 81, 81)
    metrics.observe_step(StepStats(end_time=1.0, duration=0.01, batch_size=1, k=3, running=0, waiting=0,
                                   prompt_tokens=10, generation_tokens=3, num_drafts=1, num_draft_tokens=3,
                                   num_accepted_tokens=2, accepted_per_pos=[1, 1, 0], draft_per_pos=[1, 1, 1],
                                   time_to_first_tokens=[0.2], inter_token_latencies=[0.01], finished=[finished]))
    return {family.name: family for family in registry.collect()}


def test_every_exported_series_exists_in_vllm_with_the_same_type_and_labels(exported):
    table = vllm_metric_table()
    assert len(table) > 30  # the parser found vLLM's metrics
    for name, family in exported.items():
        assert name in table, f"{name} is not a vLLM 0.33.0 metric"
        assert family.type == table[name]["kind"], name
        sample_labels = {tuple(sorted(k for k in s.labels if k != "le")) for s in family.samples}
        assert sample_labels == {tuple(sorted(table[name]["labels"]))}, name


def test_histogram_buckets_equal_vllms(exported):
    table = vllm_metric_table()
    for name, family in exported.items():
        if family.type != "histogram":
            continue
        les = sorted({float(s.labels["le"]) for s in family.samples if "le" in s.labels} - {float("inf")})
        assert les == vllm_buckets(table[name]["bucket_family"], 4096), name


def test_the_series_a_tuner_needs_are_exported(exported):
    needed = {"vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
              "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos",
              "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds",
              "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens",
              "vllm:prompt_tokens", "vllm:prompt_tokens_cached"}
    assert needed <= set(exported)
    positions = {s.labels["position"] for s in exported["vllm:spec_decode_num_accepted_tokens_per_pos"].samples
                 if s.name.endswith("_total")}
    assert positions == {"0", "1", "2"}


def test_no_spec_decode_series_without_speculation():
    registry = CollectorRegistry()
    VllmMetrics(registry, model_name="m", num_speculative_tokens=0)
    assert not [f.name for f in registry.collect() if "spec_decode" in f.name]
