"""Latency charts of the benchmark harnesses: horizontal bars on a linear axis that starts at zero.

    fig, axes = new_figure(panels=2)
    latency_bars(axes[0], ["llvm", "opencl"], [11.2, 40.5], colors=["tab:red", "tab:blue"], mins=[10.9, 39.0])
    save(fig, "chart.png")

A bar's length is read as a quantity, so the axis must start at zero: bars on a log axis that starts near the
smallest value make a 1.2x gap look like 10x (issue 28). Values several decades apart stay readable because each
bar carries its number as text.
Takes plain lists; produces matplotlib axes (matplotlib is imported lazily, `ChartUnavailable` when missing).
"""
from __future__ import annotations


class ChartUnavailable(RuntimeError):
    """matplotlib is not installed: the harness prints the table and says the chart was not written."""


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ChartUnavailable("chart not written: matplotlib is not installed "
                               "(pip install -r requirements-bench.txt)") from None
    return plt


def new_figure(panels: int = 1, width: float = 4.2, height: float = 4.6):
    """A figure of `panels` side-by-side axes (a list)."""
    fig, axes = _plt().subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    return fig, list(axes[0])


def latency_bars(ax, labels: list, values: list, colors: list | None = None, mins: list | None = None,
                 notes: list | None = None, unit: str = "ms") -> None:
    """Horizontal bars of `values` (medians), first label on top, on a linear axis from 0 to 1.3x the largest value
    (room for the text). `mins`: a black tick on each bar at the run's minimum; `notes`: text after each number."""
    ys = list(range(len(values)))
    ax.barh(ys, values, color=colors or "tab:blue")
    ax.set_yticks(ys, labels)
    if mins:
        ax.plot(mins, ys, linestyle="none", marker="|", markersize=14, color="black", label="min")
    top = max(values, default=1.0) or 1.0
    ax.set_xscale("linear")
    ax.set_xlim(0, top * 1.3)
    ax.xaxis.set_major_locator(_plt().MaxNLocator(nbins=5))
    ax.invert_yaxis()
    ax.set_xlabel(f"median latency, {unit} (linear, from 0)" + ("; black tick: min" if mins else ""))
    for y, v in enumerate(values):
        note = notes[y] if notes and notes[y] else ""
        ax.text(v, y, f" {v:.1f}{note}", va="center", fontsize=7)


def save(fig, path, title: str = "", footer: str = "") -> None:
    """Write the figure as a PNG (tight layout, `title` above all panels, `footer` below) and close it."""
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    if footer:
        fig.text(0.01, 0.005, footer, fontsize=6, va="bottom", wrap=True)
        fig.subplots_adjust(bottom=fig.subplotpars.bottom + 0.04 * (footer.count("\n") + 1))
    fig.savefig(path, dpi=110)
    _plt().close(fig)
