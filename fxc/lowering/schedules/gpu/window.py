"""Sliding-window reductions on the GPU: depthwise convolution and pooling (max, average), with their epilogues.

Takes a root whose value is an epilogue, at its own indices, of one small sum / max / min reduction of the root's
shape whose body reads the root's last axis (a window sliding along the image's width): out[..., h, w] =
f(reduce_{window} g(..., h, w, window)). One work-group is `window_width` work-items along the width of one image
row (grid: column tiles x rows x the other axes, so no work-item divides its flat index into coordinates); each
work-item computes `window_cols` outputs of the row in private accumulators, interleaved with its work-group's
(output c of work-item tj is column tj + c * window_width: neighbouring work-items read neighbouring inputs, which
a device vectorises across), sharing one loop over the window and the loads that do not depend on the column (a
depthwise convolution's weights). Loads past the row's end read its last column (in bounds; not stored).
Knobs (`Knobs.window_*`) default from the device's Caps; `window_max` bounds the window (a global pool's long
reduction is the tree reduction's or one work-item's per output).

Staged form (`window_local_bytes` > 0, the default where local memory is the device's own: a GPU): the work-group
first loads the input its row of outputs reads (every window row x the columns they span) into shared memory, in
vector loads of `vector_width` where a chunk lies inside the input, waits at a barrier, and then computes from
shared memory (window_tile.py). On a CPU device (PoCL: local memory is ordinary memory, cached) the unstaged form
reads the input directly, without the copy and the barrier: measured faster there (benchmarks/opencl_window.py).
"""
from __future__ import annotations

import math

from ....symbolic.expr import Var, as_expr, binary, compare, substitute, walk
from ...loop_ir import Barrier, For, IfThen, Load, Store, seq
from ...lower import COMBINE
from .one_per_output import one_per_output, unflatten
from .tiled_gemm import reduction_epilogue
from .window_tile import stage_window


def _match(conv, t, knobs):
    """(hole, reduce tensor, value) when t is such a windowed reduction's epilogue; else None."""
    if len(t.shape) < 3 or t.shape[-1] < 2 or knobs.window_cols < 1:
        return None
    found = reduction_epilogue(conv, t)
    if found is None:
        return None
    red_t = found[1]
    red = red_t.body
    if red.op not in COMBINE or red.op == "prod" or tuple(red_t.shape) != tuple(t.shape) \
            or not all(isinstance(n, int) for _, n in red.axes) or math.prod(n for _, n in red.axes) > knobs.window_max:
        return None
    if not any(x is red_t.axes[-1] for x in walk(red.body)):
        return None
    return found


class _Window:
    def applies(self, conv, t, knobs) -> bool:
        return _match(conv, t, knobs) is not None

    def __call__(self, conv, t, out, knobs) -> list:
        hole, red_t, value = _match(conv, t, knobs)
        red = red_t.body
        shape, axes = t.shape, red_t.axes
        rows, width, outer = shape[-2], shape[-1], shape[:-2]
        T = max(1, min(knobs.window_width, width))
        C = max(1, min(knobs.window_cols, math.ceil(width / T)))
        gj, gh, gb, tj = (Var(s) for s in ("gj", "gh", "gb", "tj"))
        rvars = [Var("k") for _ in red.axes]
        acc = conv.local("float32", C, "wacc")
        at = dict(zip(axes[:-2], unflatten(gb, outer) if outer else []))
        at[axes[-2]] = gh
        cols = [gj * (T * C) + tj + c * T for c in range(C)]
        last = as_expr(width - 1)
        tile = stage_window(conv, red_t, at, gj * (T * C), tj, T, T * C, knobs) if knobs.window_local_bytes else None
        source = tile.body if tile is not None else red.body
        update = []
        for c, col in enumerate(cols):
            pre: list = []
            v = conv.convert(substitute(source, {**at, axes[-1]: binary("min", col, last),
                                                   **{v: nv for (v, _), nv in zip(red.axes, rvars)}}), pre)
            if pre:                 # the window's body reduces again (a variance's mean): one work-item per output
                return one_per_output(conv, t, out, knobs)
            slot = as_expr(c)
            update.append(Store(acc, slot, binary(COMBINE[red.op], Load(acc, slot), v)))
        update = seq(*update)
        for v, (_, extent) in reversed(list(zip(rvars, red.axes))):
            update = For(v, extent, update)
        writes = []
        for c, col in enumerate(cols):
            idx = [at[a] for a in axes[:-1]] + [col]
            pre = []
            v = conv.convert(substitute(value, {**dict(zip(t.axes, idx)), hole.var: Load(acc, as_expr(c))}), pre)
            flat = (gb * (rows * width) if outer else as_expr(0)) + gh * width + col
            writes.append(IfThen(compare("lt", col, as_expr(width)), seq(*pre, Store(out, flat, v))))
        body = seq(*(Store(acc, as_expr(c), red.init) for c in range(C)), update, *writes)
        if tile is not None:
            body = seq(tile.stage, Barrier(), body)
        loops = For(tj, T, body, "thread", axis=0)
        loops = For(gj, math.ceil(width / (T * C)), loops, "grid", axis=0)
        loops = For(gh, rows, loops, "grid", axis=1)
        return [For(gb, math.prod(outer), loops, "grid", axis=2) if outer else loops]


window = _Window()
