"""A keyed work queue (client-go style): one reconcile per key at a time, duplicates merged, retries backed off.

Two lanes: `urgent` (a resource with no workload yet, or a new generation) is served before
`normal` (status follow-ups, resyncs), so in a burst of new resources every Deployment is
created before the operator spends its API budget on status updates of earlier ones.

kopf's event handlers are not retried, so retrying belongs here: a 409 conflict, 429,
5xx or an unreachable API server re-queues the key with exponential backoff; nothing
sleeps inside a reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from specinfer.operator.pure.errors import TemporaryError, is_retryable

log = logging.getLogger("specinfer.operator.queue")

Key = TypeVar("Key", bound=Hashable)


class WorkQueue(Generic[Key]):
    def __init__(self, process: Callable[[Key], Awaitable[None]], *, workers: int,
                 base_delay: float = 0.5, max_delay: float = 60.0) -> None:
        self.process = process
        self.workers = workers
        self.base_delay, self.max_delay = base_delay, max_delay
        self.lanes: tuple[deque[Key], deque[Key]] = (deque(), deque())  # urgent, normal
        self.wakeup = asyncio.Event()
        self.pending: dict[Key, bool] = {}  # key -> urgent
        self.active: set[Key] = set()
        self.dirty: set[Key] = set()
        self.failures: dict[Key, int] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.processed = 0
        self.errors = 0

    def add(self, key: Key, *, urgent: bool = False) -> None:
        if key in self.active:
            self.dirty.add(key)  # run once more after the current pass: it may have read stale state
        elif key not in self.pending or (urgent and not self.pending[key]):
            self.pending[key] = urgent
            self.lanes[0 if urgent else 1].append(key)  # a stale copy in the normal lane is skipped later
            self.wakeup.set()

    async def _next(self) -> Key:
        while True:
            for lane in self.lanes:
                while lane:
                    key = lane.popleft()
                    if key in self.pending:
                        del self.pending[key]
                        return key
            self.wakeup.clear()
            await self.wakeup.wait()

    def __len__(self) -> int:
        return len(self.pending)

    def add_after(self, key: Key, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, key)

    def backoff(self, key: Key) -> float:
        failures = self.failures.get(key, 0)
        return min(self.max_delay, self.base_delay * (2 ** failures))

    async def _work(self) -> None:
        while True:
            key = await self._next()
            self.active.add(key)
            try:
                await self.process(key)
                self.failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # every failure is retried with backoff, never dropped
                self.errors += 1
                delay = error.delay if isinstance(error, TemporaryError) and error.delay else self.backoff(key)
                self.failures[key] = self.failures.get(key, 0) + 1
                level = logging.INFO if is_retryable(error) else logging.ERROR
                log.log(level, "reconcile %s failed (%s: %s); retrying in %.1fs", key, type(error).__name__, error,
                        delay, exc_info=level == logging.ERROR)
                self.add_after(key, delay)
            finally:
                self.processed += 1
                self.active.discard(key)
                if key in self.dirty:
                    self.dirty.discard(key)
                    self.add(key)

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._work(), name=f"reconcile-worker-{i}") for i in range(self.workers)]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []
