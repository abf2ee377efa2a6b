"""Per-kernel profile of a CPU module built with `profile=True` (or FXC_PROFILE=1).

The generated entry adds each kernel call's nanoseconds and a call count to the library's exported
`fxc_profile_counters` (pairs of int64, one pair per call of the plan). This module reads them, keeps what each run
added (`RunSamples`, the last SAMPLES runs: a mean alone is no measure on a shared host, where one descheduled
thread makes a run hundreds of times slower) and formats the table: kernel, the fused group (ops -> output type),
calls, total, mean, median and minimum time per call, share of the total, and GFLOP/s (at the median) where the
kernel has a FLOP count. The device modules' tables (fxc/runtime/device_module.py) use the same format. Imports
only ctypes and numpy.
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import sys

import numpy as np

_PRINT_AT_EXIT: list = []       # (library, kernel lines, flops, samples) printed when the process ends
SAMPLES = 4096                  # runs (or device launches) whose times are kept for the median and minimum


def counters(lib: ctypes.CDLL, n: int) -> np.ndarray | None:
    """The (n, 2) int64 view [total ns, calls] of a profiled library's counters, or None if not profiled."""
    try:
        arr = (ctypes.c_int64 * (2 * n)).in_dll(lib, "fxc_profile_counters")
    except ValueError:
        return None
    return np.ctypeslib.as_array(arr).reshape(n, 2)


class RunSamples:
    """What each run of the plan added to the counters (an (n, 2) view: ns, calls), for the last SAMPLES runs."""

    def __init__(self, counts: np.ndarray):
        self.counts, self.last = counts, counts.copy()
        self.runs = collections.deque(maxlen=SAMPLES)

    def take(self) -> None:
        """After a run: keep what it added."""
        now = self.counts.copy()
        self.runs.append(now - self.last)
        self.last = now

    def reset(self) -> None:
        self.runs.clear()
        self.last = self.counts.copy()

    def per_call_us(self, k: int) -> np.ndarray:
        """Microseconds per call of kernel k in each kept run that called it."""
        if not self.runs:
            return np.zeros(0)
        d = np.stack(self.runs)[:, k]
        called = d[:, 1] > 0
        return d[called, 0] / d[called, 1] / 1e3

    def per_run_ms(self) -> np.ndarray:
        """Milliseconds in kernels of each kept run."""
        return np.array([r[:, 0].sum() / 1e6 for r in self.runs])


def stats_us(times_us) -> tuple:
    """(median, minimum) of a kernel's per-call microseconds; (None, None) when none was kept."""
    t = np.asarray(times_us, dtype=np.float64)
    return (float(np.median(t)), float(t.min())) if t.size else (None, None)


def profile_rows(kernel_lines: list, flops: list, counts: np.ndarray, samples: RunSamples | None = None) -> list:
    """One dict per kernel call site: kernel, group, calls, total_ms, mean_us, median_us and min_us (over the kept
    runs; None without samples), share, gflops (at the median, else the mean; None when unknown)."""
    total = max(int(counts[:, 0].sum()), 1)
    rows = []
    for k, line in enumerate(kernel_lines):
        name, _, group = line.partition(": ")
        ns, calls = int(counts[k, 0]), int(counts[k, 1])
        f = flops[k] if k < len(flops) else 0
        median, least = stats_us(samples.per_call_us(k)) if samples is not None else (None, None)
        per_call_ns = median * 1e3 if median else (ns / calls if calls else 0)
        rows.append({"kernel": name, "group": group, "calls": calls, "total_ms": ns / 1e6,
                     "mean_us": ns / 1e3 / calls if calls else 0.0, "median_us": median, "min_us": least,
                     "share": ns / total, "gflops": f / per_call_ns if f and per_call_ns else None})
    return rows


def _us(v) -> str:
    return f"{v:9.1f}" if v is not None else f"{'-':>9}"


def format_profile(rows: list, top: int | None = None, per_run_ms=None) -> str:
    """The rows as a text table, slowest first (all of them unless `top`); per_run_ms: each kept run's time in
    kernels (the header then gives its median and minimum besides the mean)."""
    rows = sorted(rows, key=lambda r: -r["total_ms"])
    total = sum(r["total_ms"] for r in rows)
    calls = max((r["calls"] for r in rows), default=0)
    runs = np.asarray(per_run_ms if per_run_ms is not None else [], dtype=np.float64)
    spread = f", median {np.median(runs):.3f} ms, min {runs.min():.3f} ms" if runs.size else ""
    out = [f"fxc profile: {len(rows)} kernels, {total:.3f} ms in kernels over {calls} runs "
           f"(per run: mean {total / max(calls, 1):.3f} ms{spread})",
           f"{'kernel':<28} {'calls':>6} {'total ms':>9} {'mean us':>9} {'median us':>9} {'min us':>9} {'share':>6} "
           f"{'GFLOP/s':>8}  group"]
    for r in rows[:top]:
        gf = f"{r['gflops']:8.1f}" if r.get("gflops") is not None else f"{'':8}"
        out.append(f"{r['kernel'][:28]:<28} {r['calls']:>6} {r['total_ms']:9.3f} {r['mean_us']:9.1f} "
                   f"{_us(r.get('median_us'))} {_us(r.get('min_us'))} {100 * r['share']:5.1f}% {gf}  "
                   f"{r.get('group', '')}")
    if top is not None and len(rows) > top:
        rest = rows[top:]
        out.append(f"... {len(rest)} more kernels, {sum(r['total_ms'] for r in rest):.3f} ms")
    return "\n".join(out)


def print_at_exit(lib: ctypes.CDLL, kernel_lines: list, flops: list, samples: RunSamples | None = None) -> None:
    """Print this library's table to stderr when the process ends (FXC_PROFILE=1 without code changes).
    Keeps only the library handle, the kernel descriptions and the run samples alive, not the module's constants."""
    if any(known is lib for known, _, _, _ in _PRINT_AT_EXIT):
        return
    if not _PRINT_AT_EXIT:
        atexit.register(_print_all)
    _PRINT_AT_EXIT.append((lib, list(kernel_lines), list(flops), samples))


def _print_all():
    for lib, lines, flops, samples in _PRINT_AT_EXIT:
        c = counters(lib, len(lines))
        if c is not None and c[:, 1].any():
            runs = samples.per_run_ms() if samples is not None else None
            print(format_profile(profile_rows(lines, flops, c, samples), 25, runs), file=sys.stderr)
