"""The healthy acceptance bands a method's module picks from (`MethodSpec.alert_band`).

The chart's `SpecinferAcceptanceBelowHealthyBand` alert (src/specinfer/monitoring/alerts.py) fires
when the acceptance of draft positions 0-2 -- the K practitioners run -- stays below its band's floor;
it reads positions 0-2 only because acceptance falls with K, so a rule on every position would fire
whenever the tuner raises K. One rule per band, over the methods that declare it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AlertBand:
    """The floor of healthy first-positions acceptance for one family of drafters."""

    name: str     # the rule's `drafting` label; its description says "<name>-based drafters"
    floor: float  # acceptance of positions 0-2 below this, for 30 minutes, fires the alert
    why: str      # where the floor comes from

    def problems(self) -> list[str]:
        found = []
        if not re.fullmatch(r"[a-z][a-z0-9-]*", self.name):
            found.append(f"alert band name {self.name!r} must be a lower-case label value (the rule's `drafting`)")
        if not 0 < self.floor < 1:
            found.append(f"alert band {self.name!r}: floor {self.floor} must be in (0, 1)")
        if not self.why:
            found.append(f"alert band {self.name!r}: say where its floor comes from (why)")
        return found


# Practitioners call 55-75% healthy for EAGLE-class drafts at the K ~ 3 they run; below 50% "the draft
# is too weak".
MODEL_DRAFTER = AlertBand("model", 0.55, "the practitioners' healthy band for EAGLE-class drafts at K ~ 3")
# n-gram and suffix lookups draft for free, and their first position needs a match in the context.
LOOKUP_DRAFTER = AlertBand("lookup", 0.20, "below this the workload rarely repeats its context")
