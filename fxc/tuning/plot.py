"""The tuning curve as a PNG (matplotlib): best latency against trials, one panel per workload (the ones that
weigh most) and one for the end-to-end estimate; linear axes from zero."""
from __future__ import annotations

import math
from pathlib import Path


def plot_curves(result, path, top: int = 8) -> Path:
    """Write result's curves (a TuneResult) to the PNG `path`; returns it."""
    import matplotlib  # deferred: optional (fxc[tune]), and only a plot needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: as above
    states = sorted((s for s in result.states if s.curve), key=lambda s: -s.share)[:top]
    n = len(states) + 1
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    panels = [("end to end (estimate)", result.e2e_curve)] + [(s.task.desc[:48], s.curve) for s in states]
    for ax, (title, curve) in zip(axes.flat, panels):
        xs, ys = [t for t, _ in curve], [c * 1e3 for _, c in curve]
        ax.step(xs, ys, where="post")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("trials")
        ax.set_ylabel("best latency (ms)")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0, top=max(ys) * 1.1 if ys and max(ys) > 0 else 1)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
