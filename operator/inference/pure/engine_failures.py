"""Why engine pods fail, read from their container statuses. Pure.

kube-controller-manager's Deployment status only counts ready pods: a crash-looping engine looks
like a rollout that never finishes. The kubelet (or the local pod runner) says more in each
pod's container status: a waiting reason (CrashLoopBackOff, an image that cannot be pulled, a
bad container config) and the last termination's exit code and message -- `specinfer runtime`
writes its one-line misconfiguration there, and with terminationMessagePolicy
FallbackToLogsOnError a crashed vLLM leaves its log tail. The reconciler turns that into
Ready=False / Degraded=True with reason EngineFailing and the message, and an Event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specinfer.operator.render.deployment import CONTAINER_NAME

# Waiting reasons after which the container will not serve without a change.
FAILING_WAITING_REASONS = frozenset({
    "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})
MESSAGE_LIMIT = 1000  # enough for a cause; a log tail is cut to its end (where the error is)


@dataclass(frozen=True)
class EngineFailure:
    pod: str
    reason: str
    message: str

    def describe(self) -> str:
        return f"engine pod {self.pod}: {self.message}"


def _tail(text: str) -> str:
    text = " ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= MESSAGE_LIMIT else "..." + text[-MESSAGE_LIMIT:]


def pod_failure(pod: Mapping[str, Any]) -> EngineFailure | None:
    """The engine container's failure, or None while it runs, starts, or was never seen failing."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return None
    for container in status.get("containerStatuses") or []:
        if container.get("name") != CONTAINER_NAME:
            continue
        waiting = (container.get("state") or {}).get("waiting") or {}
        terminated = (container.get("lastState") or {}).get("terminated") or {}
        reason = waiting.get("reason")
        if reason not in FAILING_WAITING_REASONS:
            return None
        if terminated:
            code = terminated.get("exitCode")
            cause = _tail(terminated.get("message") or "") or f"reason {terminated.get('reason') or 'Error'}"
            restarts = container.get("restartCount") or 0
            message = f"{reason}, exit code {code} ({restarts} restarts): {cause}"
        else:
            message = f"{reason}: {_tail(waiting.get('message') or '') or 'no message'}"
        return EngineFailure(pod=meta.get("name", ""), reason=reason, message=message)
    return None


def engine_failure(pods: Iterable[Mapping[str, Any]]) -> EngineFailure | None:
    """The first failing pod, by name (stable across reconciles, so status does not flap)."""
    failures = [f for f in (pod_failure(pod) for pod in pods) if f is not None]
    return min(failures, key=lambda f: f.pod) if failures else None
