"""The demo's PNG: throughput and draft length over time, load phases shaded, decisions marked."""

from __future__ import annotations

from pathlib import Path

from specinfer.demo.view import Snapshot


def effective_k(snapshot: Snapshot) -> float | None:
    effective = snapshot.status.get("effective") or {}
    return effective.get("numSpeculativeTokens")


def write_plot(snapshots: list[Snapshot], path: Path, *, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [s.elapsed_s / 60 for s in snapshots]
    figure, (throughput, k_axis) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    throughput.plot(times, [s.tokens_per_s or 0 for s in snapshots], color="tab:blue")
    throughput.set_ylabel("generated tokens/s")
    throughput.set_title(title)
    k_axis.step(times, [effective_k(s) if effective_k(s) is not None else float("nan") for s in snapshots],
                where="post", color="tab:orange", label="K (max)")
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
                throughput.text(times[start], throughput.get_ylim()[1] * 0.95, f" {snapshots[start].phase}",
                                fontsize=8, va="top")
            start = index
    previous = None
    for snapshot, minute in zip(snapshots, times):
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
