"""Features of a candidate for the cost model, read from its loop IR (fxc/lowering/loop_ir.py).

Takes a Task and a config; lowers the task's group with the config (the CPU kernel, or the device launches) and
produces a fixed-length vector: executed iterations by loop kind (serial, parallel, vectorize, unroll, grid, thread),
the innermost loop extent, vector loads/stores and their lanes, fused multiply-adds, bytes touched per level (global
loads and stores, private/shared buffers allocated), arithmetic intensity (flops per global byte), launch geometry
(work-groups, work-items), the parallel split (the parallel loop's extent and how evenly it divides among the
task's threads, or work-groups among compute units), the register tile (FMAs and loads in the innermost loop body
with the most FMAs) and the FMAs per load over the whole run; then each knob's value (numbers as they are, booleans
as 0/1, others by index). Counts enter as log(1 + x), so a difference of two vectors is a log ratio.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from ..driver.groups import group_kernel, group_launches
from ..lowering.loop_ir import Allocate, For, IfThen, LetStmt, Seq, Store, format_kernel, walk_stmts
from ..lowering.schedules.knobs import Chooser
from ..symbolic.expr import ITEMSIZE, Fma, Load, VecLoad, walk
from ..target import Target

KINDS = ("serial", "parallel", "vectorize", "unroll", "grid", "thread")
NAMES = [f"iters_{k}" for k in KINDS] + ["inner_extent", "vec_loads", "vec_lanes", "loads", "stores", "fmas",
                                           "global_bytes", "private_bytes", "shared_bytes", "flops", "intensity",
                                           "work_groups", "work_items", "kernels", "par_extent", "par_balance",
                                           "tile_fmas", "tile_loads", "fmas_per_load"]


def loop_features(kernels: list, threads: int = 1) -> list:
    """The loop-IR part of a feature vector (NAMES) of a group's kernels, run on `threads` threads (a CPU's) or
    compute units (a device's)."""
    f = dict.fromkeys(NAMES, 0.0)
    for k in kernels:
        f["kernels"] += 1
        f["flops"] += k.flops
        if k.launch is not None:
            groups = math.prod(k.launch.grid)
            f["work_groups"] += groups
            f["work_items"] += math.prod(k.launch.global_size)
            f["par_extent"] = max(f["par_extent"], groups)
        _walk(k.body, 1.0, f)
    f["intensity"] = f["flops"] / max(f["global_bytes"], 1.0)
    f["fmas_per_load"] = f["fmas"] / max(f["loads"] + f["vec_loads"], 1.0)
    e = f["par_extent"]
    f["par_balance"] = -(-e // threads) * threads / e if e else 1.0     # 1: every thread equally busy
    return [math.log1p(f[n]) for n in NAMES]


def _walk(s, trips: float, f: dict) -> None:
    """Accumulate s's features, it running `trips` times."""
    if isinstance(s, For):
        f[f"iters_{s.kind}" if s.kind in KINDS else "iters_serial"] += trips * s.extent
        if s.kind == "parallel":
            f["par_extent"] = max(f["par_extent"], s.extent)
        if not any(isinstance(x, For) for x in walk_stmts(s.body)):
            f["inner_extent"] = max(f["inner_extent"], s.extent)
            fmas, loads = _body_counts(s.body)
            if fmas > f["tile_fmas"]:
                f["tile_fmas"], f["tile_loads"] = fmas, loads
        _walk(s.body, trips * max(s.extent, 1), f)
        return
    if isinstance(s, Allocate):
        f["shared_bytes" if s.buf.scope == "shared" else "private_bytes"] += s.buf.nbytes
        _walk(s.body, trips, f)
        return
    if isinstance(s, Store):
        f["stores"] += trips
        if s.buf.scope == "global":
            f["global_bytes"] += trips * ITEMSIZE.get(s.buf.dtype, 4)
        for e in walk(s.value):
            if isinstance(e, VecLoad):
                f["vec_loads"] += trips
                f["vec_lanes"] += trips * e.args[2]
            elif isinstance(e, Load):
                f["loads"] += trips
                if e.args[0].scope == "global":
                    f["global_bytes"] += trips * ITEMSIZE.get(e.args[0].dtype, 4)
            elif isinstance(e, Fma):
                f["fmas"] += trips
        return
    for child in _children(s):
        _walk(child, trips, f)


def _body_counts(s) -> tuple:
    """(FMAs, loads) written in a loop body (each once: the work of one iteration)."""
    fmas = loads = 0
    for st in walk_stmts(s):
        if isinstance(st, Store):
            for e in walk(st.value):
                fmas += isinstance(e, Fma)
                loads += isinstance(e, (Load, VecLoad))
    return fmas, loads


def _children(s) -> list:
    if isinstance(s, Seq):
        return list(s.stmts)
    if isinstance(s, LetStmt):
        return [s.body]
    if isinstance(s, IfThen):
        return [s.then] + ([s.orelse] if s.orelse is not None else [])
    return []


def knob_values(space, config: dict) -> list:
    full = space.full(config)
    out = []
    for name, knob in space.knobs.items():
        v = full[name]
        out.append(float(v) if isinstance(v, (int, float)) else float(knob.choices.index(v)))
    return out


def analyse(task, target: Target, config: dict) -> tuple:
    """(the feature vector, a digest of the code) of task under config: its loop IR lowered here, in the tuner's
    process. Two configs with one digest make the same kernels (knobs that do not touch this group): one
    measurement serves both."""
    gr = task.group
    if target.is_cpu:
        kernels = [group_kernel(gr, "f", task.threads, target, knobs=Chooser(config))]
    else:
        kernels = group_launches(gr, "f", target.caps, config)
    code = hashlib.sha256("\n".join(format_kernel(k) for k in kernels).encode()).hexdigest()
    return np.array(loop_features(kernels, task.threads) + knob_values(task.space, config), dtype=np.float32), code
