"""Building decision dicts and describing configs in words (shared by the policy's steps)."""

from __future__ import annotations

from typing import Any


def make_decision(action: str, reason: str, *, config: dict | None = None, gain: float = 0.0,
              guard: str | None = None, signals: str | None = None, **extra: Any) -> dict:
    decision = {"action": action, "config": config, "predictedGain": round(gain, 4), "reason": reason,
                "guard": guard, "signals": signals, "degraded": None, "recommendation": None,
                "realisedGain": None, "model": None}
    decision.update(extra)
    return decision


def describe(config: dict) -> str:
    k = config["numSpeculativeTokens"]
    if k == 0:
        return "speculation off"
    if not config.get("schedule"):
        return f"K={k}"
    return "schedule " + ", ".join(f"{s}-{e}:K={ks}" for s, e, ks in config["schedule"])


def action_for(current: dict, best: dict) -> str:
    if best["numSpeculativeTokens"] == 0:
        return "disable"
    if current["numSpeculativeTokens"] == 0:
        return "reenable"
    return "setSchedule" if best.get("schedule") else "setK"
