"""Closed-loop load in phases against whatever runtime pods are serving right now.

Pods come and go during rollouts, so every request picks a current endpoint
(round robin) from a provider function; a request that fails on a pod that was
just replaced is counted, not fatal.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from specinfer.runtime.pod.calibration.requests import LoadConfig, RequestResult, connector, one_request, request_body


@dataclass(frozen=True)
class Phase:
    name: str
    concurrency: int
    seconds: float
    # Up to this many seconds more while, when its time is up, a change is still taking effect (the
    # demo's `holding`: a rollout in progress), so the story shows its outcome under the load that
    # caused it. A real engine starts in 1-2 minutes alone on two cores, and in 3-5 beside a peak.
    hold_while: float = 0.0


def phase_over(phase: Phase, elapsed: float, holding: bool) -> bool:
    """A phase ends after its seconds, or, while `holding`, after at most `hold_while` more."""
    if elapsed < phase.seconds:
        return False
    return not holding or elapsed >= phase.seconds + phase.hold_while


@dataclass
class PhaseResults:
    phase: Phase
    started: float = 0.0
    ended: float = 0.0
    results: list[RequestResult] = field(default_factory=list)

    def errors(self) -> list[tuple[str, int]]:
        """Why requests failed: each distinct error with its count, the most frequent first."""
        return collections.Counter(r.error or "unknown" for r in self.results if not r.ok).most_common()


DEFAULT_PHASES = (
    Phase("low load", concurrency=2, seconds=150),
    Phase("peak load", concurrency=96, seconds=150),
    Phase("low load again", concurrency=2, seconds=90),
)
QUICK_PHASES = (
    Phase("low load", concurrency=2, seconds=45),
    Phase("peak load", concurrency=64, seconds=45),
)


class PhasedLoad:
    def __init__(self, endpoints: Callable[[], list[str]], model: str, phases=DEFAULT_PHASES, *,
                 prompt_tokens: int = 128, output_tokens: int = 128, seed: int = 0,
                 holding: Callable[[], bool] = lambda: False, poll_s: float = 2.0):
        self.endpoints = endpoints
        self.holding = holding  # blocking (it may ask the API server): called in a thread
        self.poll_s = poll_s
        self.model = model
        self.phases = tuple(phases)
        self.config = LoadConfig(prompt_tokens=prompt_tokens, output_tokens=output_tokens, timeout_s=120)
        self.rng = random.Random(seed)
        self.done: list[PhaseResults] = []
        self.current: PhaseResults | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._round_robin = itertools.count()

    @property
    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True, name="demo-load")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=150)

    def _pick(self) -> str | None:
        endpoints = self.endpoints()
        return endpoints[next(self._round_robin) % len(endpoints)] if endpoints else None

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector()) as session:
            for phase in self.phases:
                if self._stop.is_set():
                    break
                self.current = PhaseResults(phase, started=time.time())
                over = asyncio.Event()
                await asyncio.gather(self._clock(phase, over),
                                     *(self._worker(session, over) for _ in range(phase.concurrency)))
                self.current.ended = time.time()
                self.done.append(self.current)
            self.current = None

    async def _clock(self, phase: Phase, over: asyncio.Event) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed < phase.seconds:
                await asyncio.sleep(min(0.5, phase.seconds - elapsed))  # short: a stop() ends it promptly
                continue
            holding = elapsed < phase.seconds + phase.hold_while and await self._holding()
            if phase_over(phase, elapsed, holding):
                break
            await asyncio.sleep(self.poll_s)
        over.set()

    async def _holding(self) -> bool:
        try:
            return bool(await asyncio.to_thread(self.holding))
        except Exception:  # noqa: BLE001 -- a failed check must not end the load: it holds nothing
            return False

    async def _worker(self, session: aiohttp.ClientSession, over: asyncio.Event) -> None:
        while not over.is_set() and not self._stop.is_set():
            url = self._pick()
            if url is None:
                await asyncio.sleep(0.5)  # no pod serving yet (starting or rolling)
                continue
            config = LoadConfig(url=url, prompt_tokens=self.config.prompt_tokens,
                                output_tokens=self.config.output_tokens, timeout_s=self.config.timeout_s)
            result = await one_request(session, config, request_body(config, self.model, self.rng))
            if not result.ok and url not in self.endpoints():  # the pod left while it answered
                result = dataclasses.replace(result, error=f"{result.error} (its pod had stopped serving: "
                                                           "terminating or restarted)")
            if self.current is not None:
                self.current.results.append(result)
            if not result.ok:
                await asyncio.sleep(0.5)
