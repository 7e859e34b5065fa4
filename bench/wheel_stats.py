"""vLLM 0.33.0's own stats classes and StatLoggerBase, loaded from the cached wheel without vLLM.

vLLM cannot be installed here (CUDA torch), but the modules the plugin touches are plain
Python: SpecDecodingStats (vllm/v1/spec_decode/metrics.py), SchedulerStats / IterationStats
(vllm/v1/metrics/stats.py), the plugin loader (vllm/plugins/__init__.py) and the logger base
classes (vllm/v1/metrics/loggers.py, whose other imports are heavy: only the base classes and
the loader function are taken, by AST). Their light imports get stand-ins; the code that
builds the stats is vLLM's own. Tests and bench/telemetry_overhead.py drive the plugin with it.

    with vllm_from_wheel() as vllm_modules:
        from specinfer.runtime.pod.telemetry.vllm_plugin import SpecinferStatLogger
"""

from __future__ import annotations

import ast
import contextlib
import logging
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass

from specinfer.dev.vllm_wheels import read_source

_LOGGER_CLASSES = ("StatLoggerBase", "AggregateStatLoggerBase")
_LOGGER_FUNCTIONS = ("load_stat_logger_plugin_factories",)
PLUGIN_MODULE = "specinfer.runtime.pod.telemetry.vllm_plugin"


def _module(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # importable as a package too
    module.__dict__.update(attributes)
    return module


def _exec(modules: dict[str, types.ModuleType], name: str, source: str, path: str) -> types.ModuleType:
    module = _module(name)
    module.__file__ = path
    modules[name] = module
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def logger_base_source() -> str:
    """The StatLoggerBase / AggregateStatLoggerBase classes and the plugin loader from loggers.py."""
    source = read_source("vllm/v1/metrics/loggers.py")
    tree = ast.parse(source)
    keep = [node for node in tree.body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in _LOGGER_CLASSES + _LOGGER_FUNCTIONS]
    found = {node.name for node in keep}
    missing = set(_LOGGER_CLASSES + _LOGGER_FUNCTIONS) - found
    if missing:
        raise LookupError(f"vllm/v1/metrics/loggers.py no longer defines {sorted(missing)}")
    header = ("from abc import ABC, abstractmethod\n"
              "from vllm.plugins import STAT_LOGGER_PLUGINS_GROUP, load_plugins_by_group\n"
              "from vllm.v1.metrics.stats import IterationStats, MultiModalCacheStats, SchedulerStats\n"
              "from vllm.config import VllmConfig\n"
              "StatLoggerFactory = object\n")
    # (a segment is None only for a node built by hand; these were parsed from `source`)
    return header + "\n\n".join(ast.get_source_segment(source, node) or "" for node in keep) + "\n"


@contextlib.contextmanager
def vllm_from_wheel(plugins: list[str] | None = None) -> Iterator[dict[str, types.ModuleType]]:
    """Install a minimal `vllm` package built from the wheel's sources into sys.modules, then remove it.

    `plugins` is what VLLM_PLUGINS would parse to (None: load every plugin of a group).
    """
    saved = {name: module for name, module in sys.modules.items()
             if name == "vllm" or name.startswith("vllm.") or name == PLUGIN_MODULE}
    for name in saved:
        del sys.modules[name]
    modules: dict[str, types.ModuleType] = {}

    def stub(name: str, **attributes) -> None:
        modules[name] = sys.modules[name] = _module(name, **attributes)

    class _Placeholder:  # config / stats types that only appear in annotations
        pass

    try:
        version = _exec(modules, "vllm._version", read_source("vllm/_version.py"), "vllm/_version.py")
        stub("vllm", __version__=version.__version__, __version_tuple__=version.__version_tuple__)
        stub("vllm.envs", VLLM_COMPUTE_NANS_IN_LOGITS=False, VLLM_PLUGINS=plugins)
        stub("vllm.logger", init_logger=logging.getLogger)
        stub("vllm.config", SpeculativeConfig=_Placeholder, VllmConfig=_Placeholder)
        stub("vllm.compilation")
        stub("vllm.compilation.cuda_graph", CUDAGraphStat=_Placeholder)
        for package in ("vllm.v1", "vllm.v1.metrics", "vllm.v1.spec_decode"):
            stub(package)
        stub("vllm.v1.metrics.perf", PerfStats=_Placeholder)
        for name, path in (("vllm.plugins", "vllm/plugins/__init__.py"),
                           ("vllm.v1.metrics.utils", "vllm/v1/metrics/utils.py"),
                           ("vllm.v1.metrics.cache_hit_source", "vllm/v1/metrics/cache_hit_source.py"),
                           ("vllm.v1.spec_decode.metrics", "vllm/v1/spec_decode/metrics.py"),
                           ("vllm.v1.metrics.stats", "vllm/v1/metrics/stats.py")):
            _exec(modules, name, read_source(path), path)
        _exec(modules, "vllm.v1.metrics.loggers", logger_base_source(), "vllm/v1/metrics/loggers.py")
        yield modules
    finally:
        for name in list(sys.modules):
            if name == "vllm" or name.startswith("vllm.") or name == PLUGIN_MODULE:
                del sys.modules[name]
        sys.modules.update(saved)


@dataclass(frozen=True)
class StepRequest:
    """One request in an engine step, as the scheduler and output processor see it."""

    drafted: int = 0                 # draft tokens verified for it this step
    accepted: int = 0                # accepted prefix of those
    last_output: float | None = None  # engine-core time of its previous output; None: prefill ends now
    finished: bool = False           # leaves the running queue at the end of this step


def build_step(requests: list[StepRequest], *, now: float, num_spec_tokens: int):
    """(SchedulerStats, IterationStats) for one step, built with vLLM's own code paths.

    Call inside `vllm_from_wheel()`. SpecDecodingStats goes through Scheduler.make_spec_decoding_stats'
    steps (new + observe_draft per drafting request); IterationStats through update_from_output
    with each request's new tokens and engine-core timestamps, as the output processor does.
    """
    from vllm.v1.metrics.stats import IterationStats, RequestStateStats, SchedulerStats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    spec = None
    iteration = IterationStats()
    for request in requests:
        if request.drafted:
            spec = spec or SpecDecodingStats.new(num_spec_tokens)
            spec.observe_draft(num_draft_tokens=request.drafted, num_accepted_tokens=request.accepted)
        prefilling = request.last_output is None
        state = RequestStateStats(arrival_time=iteration.iteration_timestamp - 1.0)  # wall clock, as vLLM
        if not prefilling:
            state.last_token_ts = request.last_output
        output = types.SimpleNamespace(new_token_ids=[0] * (1 + request.accepted), prefill_stats=None,
                                       num_nans_in_logits=0, events=None)
        iteration.update_from_output(output, now, prefilling, state, None, None)
    running = sum(not request.finished for request in requests)
    return SchedulerStats(num_running_reqs=running, spec_decoding_stats=spec), iteration
