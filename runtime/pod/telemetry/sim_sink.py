"""The simulator's `specinfer:` series: the plugin's accumulator and sink, fed the simulator's StepStats.

Same accumulator, same series, same rules as the vLLM plugin (effective K from the per-position
draft counts, step period = shortest inter-token latency of the step, batch size =
max(running after the step, requests with output)), so a tuner cannot tell the simulator's
telemetry from the engine's. Duck-typed on runtime/sim/engine.py's StepStats to keep this
package free of simulator imports; runtime/sim/metrics.py adds it in `build_sinks`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from specinfer.runtime.contract.telemetry.accumulator import StepAccumulator
from specinfer.runtime.pod.telemetry.live_schedule_sink import LiveScheduleExporter
from specinfer.runtime.pod.telemetry.prometheus_sink import EngineExporter


class TelemetrySink:
    """A simulator metrics sink (observe_step / set_queue) exporting the plugin's series."""

    def __init__(self, registry: CollectorRegistry, *, model_name: str, engine: str,
                 num_speculative_tokens: int, live_state_file: str | None = None) -> None:
        self.exporter = EngineExporter(StepAccumulator(max(0, num_speculative_tokens)), model_name=model_name,
                                       engine=engine, registry=registry)
        self.live_schedule = (LiveScheduleExporter(live_state_file, registry, model_name=model_name, engine=engine)
                              if live_state_file else None)

    def observe_step(self, stats) -> None:
        exporter = self.exporter
        if exporter.accumulator.observe(running=stats.running, draft_per_pos=stats.draft_per_pos,
                                        accepted_per_pos=stats.accepted_per_pos,
                                        inter_token_latencies=stats.inter_token_latencies,
                                        time_to_first_tokens=stats.time_to_first_tokens):
            exporter.observe_step()
        exporter.flush()  # simulated steps are cheap to flush; every scrape sees every step
        if self.live_schedule is not None:
            self.live_schedule.refresh()

    def set_queue(self, running: int, waiting: int) -> None:
        return None
