"""RuntimeConfig -> SimulatorSettings: the simulator runs from the same config as vLLM would."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from specinfer.runtime.contract.argv import served_model_name
from specinfer.runtime.contract.live_schedule import SCHEDULE_FILE_ENV, STATE_FILE_ENV, live_schedule_env
from specinfer.runtime.contract.runtime_config import RuntimeConfig, speculation_of
from specinfer.runtime.methods import get_method
from specinfer.runtime.sim.settings import Phase, SimulatorSettings


def simulator_settings(config: RuntimeConfig, environ: Mapping[str, str] | None = None) -> SimulatorSettings:
    spec = config.spec
    live = live_schedule_env(config.live_schedule, environ or {}) if config.live_schedule else {}
    effective = speculation_of(spec)
    simulator = spec.runtime.simulator
    method = get_method(effective.method)
    settings = SimulatorSettings(
        model_name=served_model_name(spec),
        method=effective.method,
        num_speculative_tokens=effective.num_speculative_tokens if method.speculates else 0,
        accelerator=spec.hardware.accelerator,
        mtp_modules=spec.speculation.mtp_modules,  # the simulated checkpoint has what the spec states
        adaptive_verification=bool(getattr(spec.speculation.advanced, "enable_adaptive_verification", None)),
        schedule=tuple(effective.schedule) if effective.schedule else None,
        port=spec.runtime.port,
        host="0.0.0.0",
        live_schedule_file=live.get(SCHEDULE_FILE_ENV),
        live_state_file=live.get(STATE_FILE_ENV),
    )
    if simulator is None:
        return settings
    return replace(
        settings,
        workload=simulator.workload,
        time_scale=simulator.time_scale,
        max_batch_size=simulator.max_num_seqs,
        cost_model=simulator.cost_model,
        seed=simulator.seed,
        phases=tuple(Phase(p.workload, p.duration_seconds, p.acceptance_collapsed) for p in simulator.phases or ()),
    )
