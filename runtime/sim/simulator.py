"""The simulator process's core: the engine, its scaled clock and metrics sinks, stepped by one asyncio task.

Each step sleeps for its simulated duration (scaled by time_scale) and then hands every
request its new tokens. Steps are scheduled back-to-back in simulated time, so sleep
overshoot does not inflate step latencies; when the process cannot keep up, the engine
resynchronises with the clock and counts the lag (GET /admin/state shows it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import CollectorRegistry

from specinfer.runtime.sim.clock import ScaledClock, phase_at, phase_workload
from specinfer.runtime.sim.engine import Engine, SimRequest
from specinfer.runtime.sim.metrics import build_sinks
from specinfer.runtime.sim.settings import SimulatorSettings

log = logging.getLogger("specinfer.sim")

LAG_TOLERANCE_WALL_S = 0.05


class Simulator:
    """Engine + clock + metrics, driven by one engine-loop task."""

    def __init__(self, settings: SimulatorSettings, *, clock: ScaledClock | None = None) -> None:
        self.settings = settings
        self.engine = Engine(settings)
        self.clock = clock or ScaledClock(settings.time_scale)
        self.registry = CollectorRegistry()
        self.sinks = build_sinks(self.registry, model_name=settings.model_name, engine=settings.engine_label,
                                 num_speculative_tokens=settings.num_speculative_tokens if settings.speculative else 0,
                                 max_model_len=settings.max_model_len,
                                 live_state_file=settings.live_state_file if self.engine.live_schedule else None)
        self.workload_override: str | None = None
        self.collapse_override: bool | None = None
        self.lag_s = 0.0
        self.steps = 0
        self._wake = asyncio.Event()
        self._last_end = 0.0
        self._task: asyncio.Task | None = None
        self.failure: str | None = None  # set when the engine loop died: /health then fails

    # -- lifecycle ------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.failure is None and self.clock.now() >= self.settings.startup_s

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # -- workload -------------------------------------------------------------------
    def current_workload(self) -> str:
        if self.workload_override is not None:
            return self.workload_override
        return phase_workload(self.settings.phases, self.clock.now(), self.settings.workload)

    def set_workload(self, workload: str) -> None:
        self.engine.set_workload(workload)
        self.workload_override = workload

    def current_collapsed(self) -> bool:
        """Fault injection: POST /admin/acceptance wins, else the phase's acceptanceCollapsed."""
        if self.collapse_override is not None:
            return self.collapse_override
        phase = phase_at(self.settings.phases, self.clock.now())
        return phase is not None and phase.collapsed

    def set_collapsed(self, collapsed: bool) -> None:
        self.engine.collapsed = self.collapse_override = collapsed

    # -- requests -------------------------------------------------------------------
    def submit(self, request: SimRequest) -> None:
        self.engine.add(request)
        for sink in self.sinks:
            sink.set_queue(len(self.engine.running), len(self.engine.waiting))
        self._wake.set()

    # -- engine loop ----------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug must not leave a server that accepts requests and never answers
            self.failure = f"{type(error).__name__}: {error}"
            log.exception("simulator engine loop failed; /health now reports 500")
            for request in [*self.engine.waiting, *self.engine.running]:  # answer everyone still waiting
                if request.finish_reason is None:
                    request.finish_reason = "error"
                    if request.sink is not None:
                        request.sink(0, "error")

    async def _loop(self) -> None:
        tolerance = LAG_TOLERANCE_WALL_S * self.clock.time_scale
        while True:
            if self.engine.idle:
                self._wake.clear()
                await self._wake.wait()
                self._last_end = self.clock.now()
            now = self.clock.now()
            start = self._last_end
            if now - start > tolerance:  # the process fell behind: resynchronise and account for it
                self.lag_s += now - start
                start = now
            workload = self.current_workload()
            if workload != self.engine.workload:
                self.engine.set_workload(workload)
            self.engine.collapsed = self.current_collapsed()
            plan = self.engine.plan_step(start)
            end = start + plan.duration
            delay = self.clock.wall_seconds(end - self.clock.now())
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let handlers run even when stepping flat out
            stats = self.engine.complete_step(plan, end)
            self._last_end = end
            self.steps += 1
            for sink in self.sinks:
                sink.observe_step(stats)

    def state(self) -> dict[str, Any]:
        s = self.settings
        return {
            "model": s.model_name, "method": s.method, "numSpeculativeTokens": s.num_speculative_tokens,
            "schedule": [list(r) for r in s.schedule] if s.schedule else None, "costModel": s.cost_model,
            "workload": self.engine.workload, "timeScale": s.time_scale, "maxBatchSize": s.max_batch_size,
            "simulatedSeconds": self.clock.now(), "steps": self.steps, "lagSeconds": self.lag_s,
            "running": len(self.engine.running), "waiting": len(self.engine.waiting), "ready": self.ready,
        }
