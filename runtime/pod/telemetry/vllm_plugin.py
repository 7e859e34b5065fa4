"""The vLLM stat-logger plugin: exports the `specinfer:` series on vLLM's own /metrics.

vLLM 0.33 loads it in the API server process from the `vllm.stat_logger_plugins` entry point
(`specinfer-telemetry`, allow-listed by VLLM_PLUGINS when that is set). It subclasses
AggregateStatLoggerBase, so vLLM builds one instance for all engines (`engine_indexes`) and
calls `record(...)` once per engine step from its output handler and `log()` every
VLLM_LOG_STATS_INTERVAL seconds.

It must never break serving: every entry point catches everything; the first failure is
logged once (with the traceback) and the plugin disables itself. At start-up it checks the
vLLM version and every stats field it reads, and disables itself with a message naming the
missing fields instead of failing later.
"""

from __future__ import annotations

import logging
import os
import time

from vllm.v1.metrics.loggers import AggregateStatLoggerBase

from specinfer import VLLM_VERSION
from specinfer.runtime.contract.live_schedule import STATE_FILE_ENV
from specinfer.runtime.contract.telemetry.accumulator import StepAccumulator
from specinfer.runtime.pod.telemetry.fields import field_problems, version_problem
from specinfer.runtime.pod.telemetry.live_schedule_sink import LiveScheduleExporter
from specinfer.runtime.pod.telemetry.prometheus_sink import EngineExporter

# Under vLLM's logger tree, so messages come out in vLLM's log format and level.
logger = logging.getLogger("vllm.specinfer.telemetry")

FLUSH_INTERVAL_SECONDS = 1.0


def _stats_classes() -> dict[str, type]:
    from vllm.v1.metrics.stats import IterationStats, SchedulerStats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    return {"SchedulerStats": SchedulerStats, "SpecDecodingStats": SpecDecodingStats,
            "IterationStats": IterationStats}


def _vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


class SpecinferStatLogger(AggregateStatLoggerBase):
    """Per-position draft counts, steps by effective K and step time by (batch size, K)."""

    def __init__(self, vllm_config, engine_indexes: list[int] | None = None, registry=None) -> None:
        self.disabled = False
        self.exporters: dict[int, EngineExporter] = {}
        self.live_schedule: LiveScheduleExporter | None = None  # an engine retuned in place
        self._next_flush = 0.0
        try:
            self._setup(vllm_config, list(engine_indexes or [0]), registry)
        except Exception:  # noqa: BLE001 -- telemetry must never take vLLM down; _fail logs the traceback
            self._fail("starting")

    def _setup(self, vllm_config, engine_indexes: list[int], registry) -> None:
        version = _vllm_version()
        warning = version_problem(version)
        if warning:
            logger.warning(warning)
        problems = field_problems(_stats_classes())
        if problems:
            self.disabled = True
            logger.error("specinfer telemetry is disabled: vLLM %s lacks stats fields it reads: %s. "
                         "The specinfer: series will not be exported; the tuner falls back to vLLM's "
                         "series. Run vLLM %s or update specinfer.", version, "; ".join(problems), VLLM_VERSION)
            return
        model_config = getattr(vllm_config, "model_config", None)
        model_name = str(getattr(model_config, "served_model_name", None) or "unknown")
        speculative_config = getattr(vllm_config, "speculative_config", None)
        max_k = int(getattr(speculative_config, "num_speculative_tokens", 0) or 0)
        for index in engine_indexes:
            self.exporters[index] = EngineExporter(StepAccumulator(max_k), model_name=model_name,
                                                   engine=str(index), registry=registry)
        state_file = os.environ.get(STATE_FILE_ENV)
        if state_file:  # one engine core: the operator retunes in place only without data parallelism
            from prometheus_client import REGISTRY

            self.live_schedule = LiveScheduleExporter(state_file, registry if registry is not None else REGISTRY,
                                                      model_name=model_name, engine=str(engine_indexes[0]))

    def _fail(self, during: str) -> None:
        self.disabled = True
        logger.exception("specinfer telemetry failed while %s and is now disabled; vLLM keeps serving "
                         "and its own metrics are unaffected", during)

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
        if self.disabled:
            return
        try:
            exporter = self.exporters.get(engine_idx)
            if exporter is None:
                return
            if exporter.accumulator.record(scheduler_stats, iteration_stats):
                exporter.observe_step()
            now = time.monotonic()
            if now >= self._next_flush:
                self._next_flush = now + FLUSH_INTERVAL_SECONDS
                self._flush()
        except Exception:  # noqa: BLE001 -- as above
            self._fail("recording a step")

    def _flush(self) -> None:
        for exporter in self.exporters.values():
            exporter.flush()
        if self.live_schedule is not None:
            self.live_schedule.refresh()

    def log(self) -> None:
        if self.disabled:
            return
        try:
            self._flush()
        except Exception:  # noqa: BLE001 -- as above
            self._fail("flushing counters")

    def log_engine_initialized(self) -> None:
        if self.disabled:
            return
        logger.info("specinfer telemetry exports specinfer: series for engines %s on /metrics",
                    sorted(self.exporters))

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        return None

    def record_admission_rejection(self, reason: str) -> None:
        return None
