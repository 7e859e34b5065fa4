"""The demo's live view: a pure function from one snapshot to the lines on screen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Snapshot:
    """What the demo samples every tick (all from the API server and Prometheus)."""

    elapsed_s: float
    phase: str
    concurrency: int
    status: dict[str, Any] = field(default_factory=dict)
    tokens_per_s: float | None = None       # sum over pods of rate(vllm:generation_tokens_total)
    acceptance: float | None = None
    pods_serving: int = 0


def _schedule_text(schedule: list[dict] | None) -> str:
    if not schedule:
        return "-"
    return ", ".join(f"{r['minBatchSize']}-{r['maxBatchSize']}:K={r['numSpeculativeTokens']}" for r in schedule)


def _condition(status: dict, kind: str) -> str:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind:
            reason = condition.get("reason") or ""
            return f"{condition.get('status')}{f' ({reason})' if reason else ''}"
    return "-"


def _number(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(snapshot: Snapshot, *, name: str, namespace: str, max_decisions: int = 6) -> list[str]:
    status = snapshot.status
    effective = status.get("effective") or {}
    tuning = status.get("tuning") or {}
    metrics = status.get("metrics") or {}
    minutes, seconds = divmod(int(snapshot.elapsed_s), 60)
    lines = [
        f"specinfer demo  {namespace}/{name}  t=+{minutes}m{seconds:02d}s  "
        f"phase: {snapshot.phase} ({snapshot.concurrency} concurrent requests)",
        "",
        f"  running     method {effective.get('method', '-')}  K {effective.get('numSpeculativeTokens', '-')}  "
        f"schedule {_schedule_text(effective.get('schedule'))}",
        f"  pods        {status.get('readyReplicas', 0)}/{status.get('replicas', 0)} ready, "
        f"{snapshot.pods_serving} serving   Ready {_condition(status, 'Ready')}   "
        f"Progressing {_condition(status, 'Progressing')}",
        f"  live        {_number(snapshot.tokens_per_s, '.0f')} tokens/s   acceptance "
        f"{_number(snapshot.acceptance, '.2f')}   mean batch {_number(metrics.get('meanBatchSize'), '.1f')}   "
        f"p99 per-token {_number(_ms(metrics.get('p99TimePerOutputTokenSeconds')), '.1f')} ms",
        f"  tuning      mode {tuning.get('mode', '-')}   Tuned {_condition(status, 'Tuned')}   "
        f"restarts in the last hour {tuning.get('restartsLastHour', 0)}",
    ]
    live = effective.get("liveSchedule")
    if live:  # retuned in place: what was published, and what the engines say they run
        in_force = tuning.get("inForce") or {}
        running = "in force" if in_force.get("digest") == live.get("digest") else "not yet in force"
        lines.append(f"  in place    K up to {live.get('maxNumSpeculativeTokens')}   published {live.get('digest')}: "
                     f"{running} ({in_force.get('pods', 0)} of {in_force.get('reporting', 0)} engines)")
    recommendation = tuning.get("recommendation")
    if recommendation:
        lines.append(f"  recommends  K {recommendation.get('numSpeculativeTokens', '-')} schedule "
                     f"{_schedule_text(recommendation.get('schedule'))}: {recommendation.get('reason', '')}")
    lines += ["", "  decisions (newest first):"]
    history = tuning.get("history") or []
    if not history:
        lines.append("    none yet: the tuner waits for enough samples")
    for decision in history[:max_decisions]:
        gain = decision.get("predictedGain")
        gain_text = f" ({gain:+.0%} predicted)" if isinstance(gain, (int, float)) else ""
        path = {"inPlace": " [in place]", "rollout": " [rollout]"}.get(decision.get("path") or "", "")
        lines.append(f"    {decision.get('time', '')[11:19]}  {decision.get('action', ''):<10}{gain_text}{path} "
                     f"{(decision.get('reason') or '')[:110]}")
    return lines


def _ms(seconds):
    return None if seconds is None else seconds * 1000
