"""Per-kernel profile of a CPU module built with `profile=True` (or FXC_PROFILE=1).

The generated entry adds each kernel call's nanoseconds and a call count to the library's exported
`fxc_profile_counters` (pairs of int64, one pair per call of the plan). This module reads them and
formats the table: kernel, the fused group (ops -> output type), calls, total and mean time, share
of the total, and GFLOP/s where the kernel has a FLOP count. Imports only ctypes and numpy.
"""
from __future__ import annotations

import atexit
import ctypes
import sys

import numpy as np

_PRINT_AT_EXIT: list = []       # (library, kernel lines, flops) printed when the process ends


def counters(lib: ctypes.CDLL, n: int) -> np.ndarray | None:
    """The (n, 2) int64 view [total ns, calls] of a profiled library's counters, or None if not profiled."""
    try:
        arr = (ctypes.c_int64 * (2 * n)).in_dll(lib, "fxc_profile_counters")
    except ValueError:
        return None
    return np.ctypeslib.as_array(arr).reshape(n, 2)


def profile_rows(kernel_lines: list, flops: list, counts: np.ndarray) -> list:
    """One dict per kernel call site: kernel, group, calls, total_ms, mean_us, share, gflops (None when unknown)."""
    total = max(int(counts[:, 0].sum()), 1)
    rows = []
    for k, line in enumerate(kernel_lines):
        name, _, group = line.partition(": ")
        ns, calls = int(counts[k, 0]), int(counts[k, 1])
        f = flops[k] if k < len(flops) else 0
        rows.append({"kernel": name, "group": group, "calls": calls, "total_ms": ns / 1e6,
                     "mean_us": ns / 1e3 / calls if calls else 0.0, "share": ns / total,
                     "gflops": f * calls / ns if f and ns else None})
    return rows


def format_profile(rows: list, top: int | None = None) -> str:
    """The rows as a text table, slowest first (all of them unless `top`)."""
    rows = sorted(rows, key=lambda r: -r["total_ms"])
    total = sum(r["total_ms"] for r in rows)
    calls = max((r["calls"] for r in rows), default=0)
    out = [f"fxc profile: {len(rows)} kernels, {total:.3f} ms in kernels over {calls} runs "
           f"({total / max(calls, 1):.3f} ms per run)",
           f"{'kernel':<28} {'calls':>6} {'total ms':>9} {'mean us':>9} {'share':>6} {'GFLOP/s':>8}  group"]
    for r in rows[:top]:
        gf = f"{r['gflops']:8.1f}" if r["gflops"] is not None else f"{'':8}"
        out.append(f"{r['kernel'][:28]:<28} {r['calls']:>6} {r['total_ms']:9.3f} {r['mean_us']:9.1f} "
                   f"{100 * r['share']:5.1f}% {gf}  {r['group']}")
    if top is not None and len(rows) > top:
        rest = rows[top:]
        out.append(f"... {len(rest)} more kernels, {sum(r['total_ms'] for r in rest):.3f} ms")
    return "\n".join(out)


def print_at_exit(lib: ctypes.CDLL, kernel_lines: list, flops: list) -> None:
    """Print this library's table to stderr when the process ends (FXC_PROFILE=1 without code changes).
    Keeps only the library handle and the kernel descriptions alive, not the module's constants."""
    if any(known is lib for known, _, _ in _PRINT_AT_EXIT):
        return
    if not _PRINT_AT_EXIT:
        atexit.register(_print_all)
    _PRINT_AT_EXIT.append((lib, list(kernel_lines), list(flops)))


def _print_all():
    for lib, lines, flops in _PRINT_AT_EXIT:
        c = counters(lib, len(lines))
        if c is not None and c[:, 1].any():
            print(format_profile(profile_rows(lines, flops, c), top=25), file=sys.stderr)
