"""RFC 3339 timestamps as Kubernetes writes them (`2026-11-30T15:50:03Z`), to and from epoch seconds.

The one place the operator formats or parses a time for status, conditions and Events.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch: float) -> str:
    """Seconds since the epoch -> `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds, as metav1.Time)."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: object) -> float | None:
    """An RFC 3339 time -> seconds since the epoch; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
