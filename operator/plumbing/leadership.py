"""Is this replica the active one? kopf's peering decision, re-derived for our own background tasks.

kopf pauses a lower-priority replica's watches, but the resync and the tuning loop are ours, not
kopf handlers, and kopf has no public "am I paused" API. So we read the same (Cluster)KopfPeering
object kopf writes its keep-alives into and apply kopf's rule ourselves (`peering_decision`, pure),
refreshed every few seconds through the rate-limited client (`Leadership`).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specinfer.operator.plumbing.kube import object_path

log = logging.getLogger("specinfer.operator")

REFRESH_SECONDS = 5.0   # one GET per peering object this often; a hand-over is noticed within it
DEFAULT_PRIORITY = 0    # kopf's Peer() defaults for an entry that lacks the field
DEFAULT_LIFETIME = 60


@dataclass(frozen=True)
class Decision:
    active: bool
    reason: str


def peering_objects(name: str, namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    """The peering objects kopf uses: one KopfPeering per watched namespace, else the ClusterKopfPeering.

    kopf.run(clusterwide=not namespaces) sets settings.peering.clusterwide the same way (operator_cli.py).
    """
    if namespaces:
        return [{"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name, "namespace": ns}}
                for ns in namespaces]
    return [{"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}]


def peering_paths(name: str, namespaces: tuple[str, ...]) -> list[str]:
    return [object_path(peering) for peering in peering_objects(name, namespaces)]


def _parse_lastseen(value: Any, now: datetime.datetime) -> datetime.datetime:
    """kopf writes `datetime.now(UTC).isoformat()` ("2026-11-29T13:00:53.123456+00:00") and reads it with
    iso8601.parse_date, which takes a naive time as UTC. A missing lastseen counts as `now` (kopf's Peer)."""
    if value is None:
        return now
    try:
        parsed = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return now  # unreadable: assume alive -- wrongly pausing is safer than two active replicas
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def peering_decision(status: Mapping[str, Any] | None, *, identity: str, priority: int,
                     now: datetime.datetime) -> Decision:
    """Active unless another *alive* peer has a higher or the same priority.

    Exactly kopf's rule in kopf._core.engines.peering.process_peering_event: a peer is dead when
    lastseen + lifetime <= now (Peer.is_dead); our own entry is ignored; a live peer with a higher
    priority pauses us, and so does one with the same priority (kopf then pauses every replica; its
    exception for shard selectors does not apply: we use none).
    """
    blockers = []
    for peer, info in (status or {}).items():
        if peer == identity or not isinstance(info, Mapping):
            continue
        lifetime = datetime.timedelta(seconds=int(info.get("lifetime", DEFAULT_LIFETIME)))
        if _parse_lastseen(info.get("lastseen"), now) + lifetime <= now:
            continue  # dead: kopf deletes it at its next peering event
        their = int(info.get("priority", DEFAULT_PRIORITY))
        if their > priority:
            blockers.append(f"{peer} has a higher priority ({their})")
        elif their == priority:
            blockers.append(f"{peer} has the same priority ({their})")
    if blockers:
        return Decision(False, "; ".join(sorted(blockers)))
    return Decision(True, "no alive peer with a higher or the same priority")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Leadership:
    """The current decision (`active()`, cheap, sync) and the task that refreshes it (`run()`).

    Without peering (`--standalone`) it is always active. With peering it starts in standby, like
    kopf (a mandatory peering starts paused until the first peering event), and is active only
    when every peering object says so (kopf pauses the operator if any of them does). A failed
    read keeps the last decision for that object.
    """

    def __init__(self, kube: Any, *, peering: str | None, namespaces: tuple[str, ...] = (), identity: str = "",
                 priority: int = 0, refresh_seconds: float = REFRESH_SECONDS,
                 clock: Callable[[], datetime.datetime] = _now) -> None:
        self.kube = kube
        self.identity = identity
        self.priority = priority
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.paths = peering_paths(peering, namespaces) if peering else []
        self.decisions = {path: Decision(False, "peering object not read yet") for path in self.paths}
        self.failing: set[str] = set()
        self._active = not self.paths
        self._read_once = False
        self._resume_pending = False

    def active(self) -> bool:
        return self._active

    async def _read(self, path: str) -> None:
        try:
            body = await self.kube.get(path)
            if body is None:
                raise LookupError("it does not exist")
        except Exception as error:  # noqa: BLE001 -- keep the last decision; the next refresh retries
            if path not in self.failing:
                self.failing.add(path)
                log.warning("cannot read peering object %s (%s); keeping the last decision (%s)",
                            path, error, "active" if self._active else "standby")
            return
        if path in self.failing:
            self.failing.discard(path)
            log.info("peering object %s readable again", path)
        self.decisions[path] = peering_decision(body.get("status"), identity=self.identity,
                                                priority=self.priority, now=self.clock())

    async def refresh(self) -> None:
        for path in self.paths:
            await self._read(path)
        blocking = [f"{path}: {d.reason}" for path, d in self.decisions.items() if not d.active]
        active = not blocking
        if active and not self._active and self._read_once and not self._resume_pending:
            # kopf's watches re-list when it resumes; give that one refresh period to land in the
            # cache before the resync and the tuner act on it again
            self._resume_pending = True
            return
        first, self._read_once, self._resume_pending = not self._read_once, True, False
        if active != self._active or first:
            self._active = active
            if active:
                log.info("leadership: active (no alive peer with a higher or the same priority)")
            else:
                log.info("leadership: standby (%s)", "; ".join(blocking))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the task must outlive any one bad refresh
                log.exception("leadership refresh failed: %s", error)
