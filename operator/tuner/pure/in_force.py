"""What the engines of a resource retuned in place report running, from their `specinfer:live_schedule_*`
series. Pure.

The operator publishes a schedule (status.effective.liveSchedule.digest); the engines say which one
their schedulers run. The tuner treats a published schedule that not every engine runs yet like a
rollout in progress: no window that mixes two schedules is judged. Values are a tenant's engine's
word, so they are bounded like every other series (observe.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from specinfer.api.status import LiveScheduleInForce
from specinfer.api.timestamps import rfc3339
from specinfer.runtime.contract.telemetry import series as si

Samples = list[tuple[dict[str, str], float]]
DIGEST = re.compile(r"^[0-9a-f]{12}$")
MAX_PODS = 10_000


def live_in_force(series: Mapping[str, Samples] | None) -> LiveScheduleInForce | None:
    """Pods per reported digest folded into status.tuning.inForce; None when no engine reports one."""
    series = series or {}
    pods: dict[str, int] = {}
    for labels, value in series.get("liveSchedulePods") or ():
        reported = labels.get(si.LABEL_DIGEST, "")
        if DIGEST.match(reported) and math.isfinite(value) and 0 < value <= MAX_PODS:
            pods[reported] = pods.get(reported, 0) + int(value)
    if not pods:
        return None
    reporting = sum(pods.values())
    digest: str | None = next(iter(pods)) if len(pods) == 1 else None
    since = max((v for _, v in series.get("liveScheduleSince") or () if math.isfinite(v) and 0 < v < 1e11),
                default=None)
    errors = sum(v for _, v in series.get("liveScheduleErrors") or () if math.isfinite(v) and 0 <= v < 1e12)
    return LiveScheduleInForce(digest=digest, pods=pods.get(digest, 0) if digest else 0, reporting=reporting,
                               since=rfc3339(since) if since is not None else None, errors=int(errors))


def not_in_force(published: str, in_force: LiveScheduleInForce | None, replicas: int) -> str | None:
    """Why the published schedule is not yet what every engine runs (None: it is)."""
    if in_force is None:
        return f"no engine reports a live schedule yet (published {published})"
    if in_force.digest != published:
        errors = f"; the engines refused {in_force.errors} published schedule(s)" if in_force.errors else ""
        return (f"the engines have not all taken the published schedule {published} yet "
                f"({in_force.reporting} reporting, digests differ){errors}")
    if in_force.pods < replicas:
        return f"{in_force.pods} of {replicas} engine pods run the published schedule {published}"
    return None
