"""Helpers every integration and end-to-end test shares: polling with a useful failure, reading conditions.

Importable as `tests.support` from any test module (tests/ is a package, so pytest puts the
repository root on sys.path).
"""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml


@functools.cache
def helm_homes() -> dict[str, str]:
    """Helm's cache, config and data folders for this test process alone: two runs side by side (the engine
    tests beside the rest, a second clone) share no repository index or lock, and none is left behind."""
    base = Path(tempfile.mkdtemp(prefix="specinfer-helm-"))
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    return {f"HELM_{kind}_HOME": str(base / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.3,
             alive: Callable[[], None] | None = None, why: Callable[[], str] | None = None) -> Any:
    """Poll `predicate` until it returns something truthy (and return that) or `timeout` passes.

    `alive` runs between polls and should raise when a process the test depends on has died (so a
    crash fails at once, not after the timeout); `why` adds context to the timeout message.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        if alive is not None:
            alive()
        time.sleep(interval)
    context = f"\n{why()}" if why is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value {last!r}{context}")


def condition(resource: Mapping[str, Any] | None, type_: str) -> dict:
    """The condition of that type in a resource's status, or {}."""
    for item in ((resource or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return item
    return {}


@contextmanager
def namespaced_stack(cluster, prometheus, folder, prefix: str, operator_config: dict | None = None):
    """A fresh namespace and an operator stack watching only it (with `operator_config` as its --config, if
    given); both gone afterwards."""
    from specinfer.dev.demo.stack import Stack

    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    options: tuple[str, ...] = ()
    if operator_config is not None:
        config = Path(folder) / "operator.yaml"
        config.write_text(yaml.safe_dump(operator_config))
        options = ("--config", str(config))
    stack = Stack(cluster.kubeconfig, prometheus, folder, namespaces=(namespace,),
                  operator_args=("--standalone", "-n", namespace, *options), log=print)
    stack.start()
    try:
        yield namespace, stack
    finally:
        stack.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def wait_for_crds_established(kubectl: Callable[..., Any], *crds: str, timeout: float = 60) -> None:
    """`kubectl wait --for=condition=Established` for each CRD, again while it fails: on a CRD just created,
    before the API server has written any condition, it fails at once (".status.conditions accessor
    error: <nil>", seen 2026-12-04) instead of waiting."""
    for crd in crds:
        wait_for(lambda crd=crd: kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=10s",
                                         check=False).returncode == 0,
                 timeout=timeout, interval=1, what=f"CRD {crd} Established")


# A denied request in a log: the API's "Forbidden" reason, or HTTP 403 as a token of its own -- not the
# digits of a random port (":38403"), of a timestamp's milliseconds (",403"), or inside a random name
# ("t-gitops-8d403b": a uuid's hex, which failed a CI run).
DENIED = re.compile(r"forbidden|(?<![\w,.:/-])403(?![\w-])", re.IGNORECASE)


def denied_lines(text: str) -> list[str]:
    """The lines of a log that report a denied request."""
    return [line for line in text.splitlines() if DENIED.search(line)]
