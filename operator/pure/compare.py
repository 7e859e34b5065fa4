"""Is the live object already what we would apply? (Decides between a write and no write.)

`covers(desired, live)`: every field we render has the same value on the live object;
fields the API server or others added (defaults, status, extra labels) are ignored. A
hand edit of a field we own shows up as a difference and is applied back (drift).
"""

from __future__ import annotations

from typing import Any


def _scalar_equal(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    # quantities and int-or-string fields come back as strings ("1" vs 1)
    if isinstance(desired, (int, str)) and isinstance(live, (int, str)) and not isinstance(desired, bool):
        return str(desired) == str(live)
    return False


def covers(desired: Any, live: Any) -> bool:
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(key in live and covers(value, live[key]) for key, value in desired.items()
                   if value is not None)
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(covers(d, item) for d, item in zip(desired, live, strict=True))
    return _scalar_equal(desired, live)
