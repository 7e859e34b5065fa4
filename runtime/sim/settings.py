"""What one simulator process runs: the engine's speculative config and the simulation knobs.

A plain dataclass (not the API models) so `specinfer sim` works standalone and the
engine stays independent of the CRD; `specinfer runtime` converts the effective
SpeculativeInferenceSpec into these settings (runtime/sim_from_runtime_config.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from specinfer.runtime.methods import ACCELERATORS, get_accelerator, get_method, methods_without_drafts
from specinfer.runtime.methods.engine_truth import why_not_offered
from specinfer.runtime.methods.schedule import schedule_problems
from specinfer.runtime.sim.model import COST_MODELS, METHODS, WORKLOADS


@dataclass(frozen=True)
class Phase:
    """Run `workload` for `duration_s` simulated seconds (phases run in order, then loop)."""

    workload: str
    duration_s: float
    collapsed: bool = False  # fault injection: the drafter is broken in this phase (model.COLLAPSED)


@dataclass(frozen=True)
class SimulatorSettings:
    model_name: str = "simulated-model"
    method: str = "none"  # spec method name: the catalogue's (its cost shape and acceptance come from there)
    # the accelerator the simulated engine stands for: its engine release's drafter decides how drafting
    # follows the scheduled K (runtime/methods/drafters.py), as in the real engine
    accelerator: str = "nvidia"
    # method mtp: the simulated checkpoint's MTP module count (None: several, the worst case)
    mtp_modules: int | None = None
    # vLLM's adaptive verification (runtime/methods/adaptive.py): verify only the draft slots worth it
    adaptive_verification: bool = False
    num_speculative_tokens: int = 0  # 0 with method none
    schedule: tuple[tuple[int, int, int], ...] | None = None  # num_speculative_tokens_per_batch_size
    workload: str = "chat"
    phases: tuple[Phase, ...] = ()
    cost_model: str = "h100-llama8b"
    max_batch_size: int = 256  # vLLM's max_num_seqs
    time_scale: float = 1.0  # simulated seconds per wall-clock second
    seed: int = 0
    noise: float = 0.05  # lognormal sigma of step-time noise
    default_max_tokens: int = 256
    max_model_len: int = 8192
    startup_s: float = 0.0  # simulated model-load time before /health turns 200
    host: str = "0.0.0.0"
    port: int = 8000
    engine_label: str = "0"
    # Retuned in place (runtime/live_schedule/): follow this published schedule file, report in the state file.
    live_schedule_file: str | None = None
    live_state_file: str | None = None
    admin: bool = False
    """Serve /admin/workload and /admin/state. Off by default: nothing authenticates them, and a
    workload switch steers what the tuner sees (issue 15); `specinfer sim --admin` turns them on."""

    @property
    def speculative(self) -> bool:
        return self.method not in methods_without_drafts() and self.num_speculative_tokens > 0

    def problems(self) -> list[str]:
        """Every reason these settings cannot run, naming the setting and the fix."""
        found: list[str] = []
        if self.method not in METHODS:
            found.append(f"method: unknown {self.method!r}; known: {', '.join(METHODS)}")
        elif self.accelerator not in ACCELERATORS:
            found.append(f"accelerator: unknown {self.accelerator!r}; known: {', '.join(ACCELERATORS)}")
        elif not get_method(self.method).supports(self.accelerator):
            reason = why_not_offered(get_method(self.method), get_accelerator(self.accelerator))
            found.append(f"method: {self.method} is not offered on accelerator {self.accelerator} ({reason})")
        phase_workloads = [(f"phases[{i}].workload", p.workload) for i, p in enumerate(self.phases)]
        for name, workload in [("workload", self.workload), *phase_workloads]:
            if workload not in WORKLOADS:
                found.append(f"{name}: unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
        for index, phase in enumerate(self.phases):
            if phase.duration_s <= 0:
                found.append(f"phases[{index}].durationSeconds must be > 0, got {phase.duration_s}")
        if self.cost_model not in COST_MODELS:
            found.append(f"costModel: unknown {self.cost_model!r}; known: {', '.join(sorted(COST_MODELS))}")
        if self.max_batch_size <= 0:
            found.append(f"maxBatchSize must be > 0, got {self.max_batch_size}")
        if self.time_scale <= 0:
            found.append(f"timeScale must be > 0 (simulated seconds per wall second), got {self.time_scale}")
        if self.num_speculative_tokens < 0:
            found.append(f"numSpeculativeTokens must be >= 0, got {self.num_speculative_tokens}")
        if self.schedule is not None and self.speculative:
            found.extend(f"schedule: {p}" for p in schedule_problems(self.schedule, self.num_speculative_tokens))
        if self.mtp_modules is not None and self.mtp_modules < 1:
            found.append(f"mtpModules must be >= 1, got {self.mtp_modules}")
        if self.noise < 0:
            found.append(f"noise must be >= 0, got {self.noise}")
        return found
