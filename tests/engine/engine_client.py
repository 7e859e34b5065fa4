"""Talking to a real engine pod from a test: OpenAI completions, closed-loop load, and its /metrics.

The engine's own counters are read straight from the pod's /metrics (one HTTP response is one
instant, so every series in it covers the same window), not through Prometheus, whose rate()
extrapolates.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


def complete(base_url: str, prompt: str, max_tokens: int = 48, timeout: float = 120) -> dict:
    """One greedy OpenAI completion that runs to max_tokens."""
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{base_url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        return json.loads(response.read())


def rounds(base_url: str, prompt: str, *, concurrency: int, count: int, max_tokens: int = 64) -> None:
    """`count` rounds of `concurrency` identical requests sent together (each round waits for all)."""
    with ThreadPoolExecutor(concurrency) as pool:
        for _ in range(count):
            for answer in pool.map(lambda _: complete(base_url, prompt, max_tokens), range(concurrency)):
                assert answer["usage"]["completion_tokens"] == max_tokens, answer


class Metrics:
    """One scrape of an engine's /metrics: sample name + labels -> value."""

    def __init__(self, text: str):
        self.samples: dict[tuple[str, Labels], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value

    @classmethod
    def scrape(cls, base_url: str) -> Metrics:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
            return cls(response.read().decode())

    def total(self, name: str) -> float:
        """Sum over every label set (the engine runs one engine index: 0)."""
        return sum(value for (sample, _), value in self.samples.items() if sample == name)

    def by(self, name: str, label: str) -> dict[str, float]:
        """Sum of `name` per value of `label`."""
        out: dict[str, float] = defaultdict(float)
        for (sample, labels), value in self.samples.items():
            if sample == name:
                out[dict(labels).get(label, "")] += value
        return dict(out)


def per_position(metrics: Metrics, name: str) -> list[float]:
    """A per-position counter as a list indexed by position."""
    values = metrics.by(name, "position")
    return [values.get(str(i), 0.0) for i in range(max((int(p) for p in values), default=-1) + 1)]


def minus(after: list[float], before: list[float]) -> list[float]:
    return [a - (before[i] if i < len(before) else 0.0) for i, a in enumerate(after)]


def settled(base_url: str, names: tuple[str, ...], *, timeout: float = 30, quiet: float = 2.5) -> Metrics:
    """The engine's /metrics once `names` have not moved for `quiet` seconds (the stat-logger plugin
    flushes at vLLM's next log(), up to VLLM_LOG_STATS_INTERVAL after the last step)."""
    deadline = time.monotonic() + timeout
    last = Metrics.scrape(base_url)
    still_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = Metrics.scrape(base_url)
        if any(now.total(name) != last.total(name) for name in names):
            still_since = time.monotonic()
        elif time.monotonic() - still_since >= quiet:
            return now
        last = now
    return last


# Seconds between a client's requests while a new engine starts beside the one serving: an engine serving two
# clients every 0.5 s took most of both cores (its worker, and an engine core that polls), and a new one beside it
# then needed 40-164 s to start, beside 64 back-to-back clients up to 7.5 minutes (2026-12-04). On a node the new
# pod would have cores of its own; a rollout must show only that requests keep being answered.
ROLLOUT_THINK = 3.0


class ClosedLoop:
    """`concurrency` workers sending completions to whichever URLs `endpoints` returns (pods come and
    go in a rollout: a worker waits while none serves), each `think_seconds` after its last answer
    (0: back to back). Counts successes and failures.

    Think time leaves CPU for a new engine to start beside the serving one: on two cores an engine
    serving back-to-back requests takes both (its worker, and an engine core that polls)."""

    def __init__(self, endpoints: Callable[[], list[str]], prompt: str | Sequence[str], *, concurrency: int,
                 max_tokens: int = 128, think_seconds: float = 0.0):
        # several prompts: each worker sends them in turn, starting at its own
        self.prompts = (prompt,) if isinstance(prompt, str) else tuple(prompt)
        self.endpoints, self.concurrency, self.max_tokens = endpoints, concurrency, max_tokens
        self.think_seconds = think_seconds
        self.ok = 0
        self.failed: list[str] = []
        self.served_by: dict[str, int] = defaultdict(int)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(concurrency)]

    def __enter__(self) -> ClosedLoop:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)

    def _work(self, index: int) -> None:
        sent = index
        while not self._stop.is_set():
            urls = self.endpoints()
            if not urls:
                time.sleep(0.5)
                continue
            url = urls[index % len(urls)]
            try:
                complete(url, self.prompts[sent % len(self.prompts)], self.max_tokens)
            except Exception as error:  # noqa: BLE001 -- counted: a test asserts on failures
                with self._lock:
                    self.failed.append(f"{url}: {error}")
                time.sleep(0.5)
                continue
            sent += 1
            with self._lock:
                self.ok += 1
                self.served_by[url] += 1
            self._stop.wait(self.think_seconds)
