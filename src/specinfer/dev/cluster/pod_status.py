"""The pod status a kubelet would report for a locally run pod. Pure.

The pod runner owns the status of the pods that run the real engine (kwok's own stage only marks
a Pending pod Running and Ready at once, and never again): Ready follows the readinessProbe, an
exited container waits in CrashLoopBackOff with its last termination (exit code and termination
message), and a pod whose image cannot be had locally waits with the reason a kubelet gives. A
pod that never restarts (a Job's) ends Succeeded or Failed with its container terminated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The kubelet's FallbackToLogsOnError: the log tail, at most 80 lines and 2048 bytes.
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048


@dataclass(frozen=True)
class Termination:
    exit_code: int
    message: str
    finished_at: str

    def as_status(self) -> dict[str, Any]:
        return {"terminated": {"exitCode": self.exit_code, "reason": "Completed" if self.exit_code == 0 else "Error",
                               "message": self.message, "finishedAt": self.finished_at}}


def termination_message(termination_log: Path, process_log: Path, *, exit_code: int, policy: str | None) -> str:
    """What the kubelet shows as the container's termination message."""
    try:
        written = termination_log.read_text(errors="replace").strip()
    except FileNotFoundError:
        written = ""
    if written or exit_code == 0 or policy != "FallbackToLogsOnError":
        return written
    try:
        with open(process_log, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - FALLBACK_BYTES))
            tail = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(tail.splitlines()[-FALLBACK_LINES:]).strip()


def container_state(*, running: bool, started_at: str | None, waiting: tuple[str, str] | None,
                    finished: Termination | None = None) -> dict[str, Any]:
    if finished is not None:
        return {"terminated": {**finished.as_status()["terminated"], "startedAt": started_at}}
    if waiting is not None:
        reason, message = waiting
        return {"waiting": {"reason": reason, "message": message}}
    if running:
        return {"running": {"startedAt": started_at}}
    return {"waiting": {"reason": "ContainerCreating"}}


def pod_status(*, container: str, image: str, ready: bool, restarts: int, state: Mapping[str, Any],
               last: Termination | None, now: str, phase: str = "Running") -> dict[str, Any]:
    ready_text = "True" if ready else "False"
    status: dict[str, Any] = {"name": container, "image": image, "ready": ready, "restartCount": restarts,
                              "started": "running" in state, "state": dict(state)}
    if last is not None:
        status["lastState"] = last.as_status()
    return {"phase": phase,
            "conditions": [{"type": "Ready", "status": ready_text, "lastTransitionTime": now},
                           {"type": "ContainersReady", "status": ready_text, "lastTransitionTime": now}],
            "containerStatuses": [status]}


def signature(status: Mapping[str, Any] | None) -> tuple:
    """What a status says, without timestamps: write only when this differs from the live pod's."""
    status = status or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    containers = status.get("containerStatuses") or [{}]
    first = containers[0] or {}
    state = first.get("state") or {}
    kind = next(iter(state), None)
    last = ((first.get("lastState") or {}).get("terminated") or {})
    return (status.get("phase"), ready, first.get("ready"), first.get("restartCount"), kind,
            (state.get(kind) or {}).get("reason") if kind else None, last.get("exitCode"), last.get("message"))
