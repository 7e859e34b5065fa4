"""HTTP health checks on loopback: the pod runner's readiness probe and the start-up waits of
benchmarks and tests (the way a kubelet's httpGet probe judges: any 2xx or 3xx is healthy)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable


def http_ok(url: str, *, timeout: float = 0.5) -> bool:
    """One GET: True for 2xx/3xx; False for any other status, a refused connection or a timeout."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 200 <= response.status < 400
    except (urllib.error.URLError, OSError, ValueError):  # HTTPError (4xx/5xx) is a URLError
        return False


def wait_http_ok(url: str, *, timeout: float, alive: Callable[[], None] | None = None,
                 interval: float = 0.2) -> None:
    """Poll `url` until it answers OK; `alive` runs between polls and raises when the server died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        if http_ok(url):
            return
        time.sleep(interval)
    raise TimeoutError(f"{url} did not answer 2xx within {timeout:.0f}s")
