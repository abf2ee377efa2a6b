"""Row launches: a fused group with a symbolic number of rows on a GPU-family target (opencl, opengl, webgl, webgpu).

Takes a fused group whose symbolic tensors have one size symbol `s` in their leading non-unit dim ("rows",
fxc/lowering/blocks.py, whose checks it applies: every read of a row tensor is of the row its output is in) and
produces the device kernels of the group's static GPU schedule at ROW_BLOCK rows and at one row, with each
operand's bytes per row. Nothing in a kernel depends on `s`: at call time the runtime binds `s` from the input
shapes and launches

    the ROW_BLOCK-row kernels  s // ROW_BLOCK times, at rows 0, ROW_BLOCK, 2 ROW_BLOCK, ...
    the one-row kernels        s % ROW_BLOCK times, at rows s // ROW_BLOCK * ROW_BLOCK + r

(where a target's operand offsets must be multiples of `Caps.row_align` elements, WebGL's 4-element texels, and a
row's elements are not, the last rows run in launches of `tail_rows` rows, 2 or 4, the smallest unit that keeps
every offset aligned: ceil(s % ROW_BLOCK / unit) launches; the rows past s that the last one computes are in
the buffers' padding, the runtime sizes them for ROW_BLOCK rows more. With `Caps.binary_tails` the rows after the
blocks run as at most one launch of 4 rows, one of 2, then the last unit's: a batch of 7 is 3 launches, not 7)

each launch with its operands' offsets (OpenCL's offset arguments, GL's offset uniforms) moved to its first row,
and the symbolic part of the workspace placed at `base + s * per` (fxc.runtime.row_plan evaluates both).
So a size's launches run exactly the static schedule of ROW_BLOCK rows (and of one row), and one build serves
every size in the symbol's range.
"""
from __future__ import annotations

import math

from ..errors import LoweringError
from ..lowering.blocks import ROW_BLOCK, check_rows, group_symbol, row_layout
from ..lowering.loop_ir import Buffer
from ..lowering.schedules.gpu import lower_group_device
from ..symbolic.expr import ITEMSIZE
from .groups import group_tensors


def row_bytes(gr, sym) -> list:
    """Bytes per row of each output then each input of group gr (0 for a static operand)."""
    out = []
    for v in list(gr.outputs) + list(gr.inputs):
        lay = row_layout(v.shape, sym)
        out.append(0 if lay is None else lay[1] * ITEMSIZE[v.dtype])
    return out


def tail_rows(gr, caps, sym) -> int:
    """Rows of the launches after the blocks: the fewest (1, 2, 4, ...) whose elements in every row operand of
    gr are a multiple of caps.row_align (1 where the target takes any offset)."""
    unit = 1
    for v in list(gr.outputs) + list(gr.inputs):
        lay = row_layout(v.shape, sym)
        while lay is not None and lay[1] * unit % caps.row_align:
            unit *= 2
    if ROW_BLOCK % unit:
        raise LoweringError(f"rows of {gr.describe()} need launches of {unit} rows; blocks are of {ROW_BLOCK}")
    return unit


def row_launches(gr, name: str, caps, sym) -> dict:
    """{rows: the device kernels (launches in order) of group gr at that many rows} for ROW_BLOCK and tail_rows
    rows (and 4, 2 rows with Caps.binary_tails), in that order; LoweringError when the group reads rows other than
    those it writes (then the graph builds per size)."""
    out = {}
    unit = tail_rows(gr, caps, sym)
    tails = [x for x in (4, 2, 1) if x >= unit] if caps.binary_tails else [unit]
    for size in [ROW_BLOCK] + tails:
        tensors: dict = {}
        roots, _, ins = group_tensors(gr, {sym.name: size}, tensors)
        bufs = [Buffer(f"out{k}", o.dtype, math.prod(t.shape)) for k, (o, t) in enumerate(zip(gr.outputs, roots))]
        if size == ROW_BLOCK:
            check_rows(gr, sym, tensors)
        out[size] = lower_group_device(f"{name}_r{size}", roots, bufs, ins, caps)
    return out


def symbolic_group(gr, sym) -> bool:
    """Whether group gr has tensors with the size symbol (then it runs as row launches)."""
    return sym is not None and group_symbol(gr) is not None
