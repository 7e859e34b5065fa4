"""The demo's PNG: throughput and draft length over time, load phases shaded, decisions marked."""

from __future__ import annotations

from pathlib import Path

from specinfer.dev.demo.view import Snapshot
from specinfer.runtime.methods.schedule import effective_k


def max_k(snapshot: Snapshot) -> float:
    k = (snapshot.status.get("effective") or {}).get("numSpeculativeTokens")
    return float("nan") if k is None else k


def k_at_batch_size(snapshot: Snapshot) -> float:
    """The K the engine drafts with at the mean batch size the tuner last saw (schedule applied)."""
    effective = snapshot.status.get("effective") or {}
    batch = (snapshot.status.get("metrics") or {}).get("meanBatchSize")
    k = effective.get("numSpeculativeTokens")
    if k is None or batch is None:
        return float("nan")
    schedule = [(r["minBatchSize"], r["maxBatchSize"], r["numSpeculativeTokens"])
                for r in effective.get("schedule") or []]
    return effective_k(max(1, round(batch)), k, schedule or None)


def write_plot(snapshots: list[Snapshot], path: Path, *, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [s.elapsed_s / 60 for s in snapshots]
    figure, (throughput, k_axis) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    throughput.plot(times, [s.tokens_per_s or 0 for s in snapshots], color="tab:blue")
    throughput.set_ylabel("generated tokens/s")
    throughput.set_title(title)
    k_axis.step(times, [max_k(s) for s in snapshots], where="post", color="tab:orange", label="K (maximum)")
    k_axis.step(times, [k_at_batch_size(s) for s in snapshots], where="post", color="tab:green",
                label="K at the current batch size (schedule)")
    k_axis.set_ylim(bottom=-0.3)
    k_axis.set_ylabel("draft length K")
    k_axis.set_xlabel("minutes")
    # Shade phases and mark when the applied configuration changed.
    start = 0
    for index in range(1, len(snapshots) + 1):
        if index == len(snapshots) or snapshots[index].phase != snapshots[start].phase:
            if index - start > 0 and start < len(times):
                end_time = times[min(index, len(times) - 1)]
                for axis in (throughput, k_axis):
                    axis.axvspan(times[start], end_time, alpha=0.08 if snapshots[start].concurrency < 16 else 0.2,
                                 color="grey")
                if end_time - times[start] > 0.05 * (times[-1] or 1):  # no label on a blip ("starting")
                    throughput.text(times[start], throughput.get_ylim()[1] * 0.95, f" {snapshots[start].phase}",
                                    fontsize=8, va="top")
            start = index
    previous = None
    for snapshot, minute in zip(snapshots, times, strict=True):
        config_hash = (snapshot.status.get("effective") or {}).get("configHash")
        if previous is not None and config_hash != previous:
            for axis in (throughput, k_axis):
                axis.axvline(minute, color="tab:red", linestyle="--", linewidth=0.8)
        previous = config_hash
    k_axis.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
