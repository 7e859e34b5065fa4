"""The vLLM scheduler that takes a new Dynamic SD schedule between steps (`--scheduler-cls`).

vLLM keeps the schedule as a dense batch-size -> K list on its scheduler (`dynamic_sd_lookup`,
built in `Scheduler.__init__` by `build_dynamic_sd_schedule_lookup` and read once per step in
`schedule()`); this subclass swaps that list when the published file changes. It is a subclass of
what vLLM itself would pick: `AsyncScheduler` when `scheduler_config.async_scheduling` is on,
`Scheduler` when it is off (as on CPU) -- `__new__` chooses by the same field vLLM's
`SchedulerConfig.get_scheduler_cls` reads. tests/contract/test_vllm_live_schedule.py pins every vLLM
internal used here in both pinned wheels.

Imported only inside the engine (vLLM resolves the class by name); it must never stop the engine:
without a startup schedule, or with no file configured, it behaves exactly like vLLM's own class.
"""

from __future__ import annotations

import functools
import logging
import os

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

from specinfer.runtime.contract.live_schedule import SCHEDULE_FILE_ENV, STATE_FILE_ENV
from specinfer.runtime.contract.live_schedule.published import PublishedSchedule
from specinfer.runtime.pod.live_schedule.watcher import ScheduleWatcher

logger = logging.getLogger("vllm.specinfer.live_schedule")


class LiveScheduleScheduler(Scheduler):
    def __new__(cls, *args, **kwargs):
        if cls is LiveScheduleScheduler:
            vllm_config = kwargs.get("vllm_config", args[0] if args else None)
            if getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False):
                cls = LiveScheduleAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._live_schedule: ScheduleWatcher | None = None
        try:
            self._live_schedule = self._start_watcher()
        except Exception:  # a broken watcher must not take the engine down
            logger.exception("live schedule: disabled; the engine keeps its startup schedule")

    def _start_watcher(self) -> ScheduleWatcher | None:
        path = os.environ.get(SCHEDULE_FILE_ENV)
        speculative = self.vllm_config.speculative_config
        startup = getattr(speculative, "num_speculative_tokens_per_batch_size", None) if speculative else None
        if not path or getattr(self, "dynamic_sd_lookup", None) is None or not startup:
            logger.warning("live schedule: disabled (%s); the engine keeps its startup configuration",
                           "no schedule file configured" if not path else "the engine started without a schedule")
            return None
        build = functools.partial(build_dynamic_sd_schedule_lookup,
                                  vllm_max_batch_size=self.scheduler_config.max_num_seqs,
                                  vllm_num_speculative_tokens=self.num_spec_tokens)
        ranges = tuple((int(s), int(e), int(k)) for s, e, k in startup)
        watcher = ScheduleWatcher(path, startup=PublishedSchedule(ranges),
                                  max_k=self.num_spec_tokens, build=build,
                                  state_path=os.environ.get(STATE_FILE_ENV) or None)
        lookup = watcher.poll()  # a pod started after a retune runs the published schedule from its first step
        if lookup is not None:
            self.dynamic_sd_lookup = lookup
        logger.info("live schedule: following %s (at most K=%d, batch sizes up to %d)", path, self.num_spec_tokens,
                    self.scheduler_config.max_num_seqs)
        return watcher

    def schedule(self, *args, **kwargs):
        watcher = self._live_schedule
        if watcher is not None:
            lookup = watcher.poll()  # never raises
            if lookup is not None:
                self.dynamic_sd_lookup = lookup  # read by this very step's super().schedule()
        return super().schedule(*args, **kwargs)


class LiveScheduleAsyncScheduler(LiveScheduleScheduler, AsyncScheduler):
    """The same with async scheduling (vLLM's choice on GPUs when it is on)."""
