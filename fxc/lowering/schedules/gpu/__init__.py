"""GPU-family schedules: the tensor expressions of one fused group -> device loop-IR Kernels (launches).

`lower_group_device(name, roots, out_bufs, in_bufs, caps)` returns a list of Kernels that share one parameter
list (outputs, inputs, then scratch buffers) and run in order on one queue; each has its launch geometry
(grid / thread loops) and scalar expressions. Each root is scheduled by the entry of `SCHEDULES` for its kind:

- "gemv": an epilogue of a matrix product with few rows whose weight is read along k (a classifier at batch 1):
  work-items along k in vectors, a shared-memory tree over them (gemv.py);
- "gemm": an epilogue of a matrix product (matmul, linear, batched attention products): tile x tile work-groups
  staging blocks of both operands in shared memory (tiled_gemm.py);
- "window": an epilogue of a small sliding-window reduction along the last axis (depthwise convolution, max and
  average pooling): work-groups along an image row, several outputs per work-item sharing the window loop
  (window.py), on GPUs from the row's input tile staged in shared memory with vector loads (window_tile.py);
- "reduce": a root that is a reduction with few outputs and long rows: one work-group per output, a
  work-group tree reduction in shared memory with barriers (reduction.py);
- "compute": every other compute op (elementwise, injective, reductions, conv/dense written as computes):
  one work-item per output element (one_per_output.py);
- "extern": ops whose definition is hand-written loop IR (te.extern): the CPU lowering's outermost parallel
  loops become the launch grid, one work-item per iteration; code outside them runs as one work-item
  (from_loops.py). Nothing leaves the device. An extern whose op also gives a compute form (`attrs["compute"]`:
  max pooling) is scheduled as that compute instead on devices with local memory of their own (GPUs); on a CPU
  device (PoCL) its CPU loop IR, vectorised along rows without bounds tests inside, measured faster.

Knobs (work-group size, reduction threads, ...) are the 20 fields of `Knobs`; their defaults come from the device's
Caps (`Knobs.for_caps`). `knob_space(caps)` declares each one's choices and the constraints a config must meet (a
tuner's search space, schedules/knobs.py); `knobs_of(caps, config)` is the defaults with a config's values.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ... import te
from ...legalize import scalarize
from ...loop_ir import Kernel, index_bits_of, launch_of
from ...te import Tensor
from .. import lookup
from ..knobs import Constraint, Knob, Space
from .from_loops import extern_launches
from .gemv import gemv
from .one_per_output import DeviceConverter, one_per_output
from .reduction import tree_reduction
from .tiled_gemm import tiled_gemm
from .window import window


@dataclass(frozen=True)
class Knobs:
    work_group_size: int = 64           # work-items per work-group of a one-per-output launch
    reduce_threads: int = 64            # work-items that reduce one output together (tree reduction)
    reduce_min_length: int = 1024       # rows at least this long reduce in a work-group ...
    reduce_max_outputs: int = 256       # ... when there are at most this many of them
    gemm_tile: int = 16                 # a tiled GEMM's work-group is gemm_tile x gemm_tile (1: no tiled GEMM)
    gemm_shared: bool = True            # stage GEMM blocks in shared memory (False: register tiles, for devices
    gemm_rows: int = 4                  # whose local memory is plain memory) of gemm_rows x gemm_cols outputs
    gemm_cols: int = 4                  # per work-item
    window_width: int = 16              # work-items along an image row of a windowed reduction (depthwise, pool)
    window_cols: int = 4                # outputs of the row per work-item (0: no window schedule)
    window_max: int = 64                # the largest window (reduction length) it takes
    window_local_bytes: int = 0         # shared memory a windowed work-group may stage its input tile in (0: none,
                                        # the input is read directly: the faster form on a CPU device)
    extern_computes: bool = True        # an extern op with a compute form runs as that compute (False: its CPU
                                        # loop IR, row by row: faster where the device is a CPU, e.g. a max pool)
    vector_width: int = 1               # lanes of the vector loads a schedule emits (1: scalar loads only)
    gemv_max_rows: int = 4              # a matrix product with at most this many rows (x batch) is a GEMV (0: none)
    gemv_threads: int = 1               # work-items along k per output of a GEMV (a power of two; > 1: a tree)
    gemv_outputs: int = 16              # outputs per GEMV work-group
    gemm_tile_rows: int = 0             # register tiles: work-items along the rows (0: gemm_tile, a square group)
    gemm_lockstep: int = 0              # register tiles: the work-group steps through the reduction together, a
                                        # barrier every this many steps of its outermost loop (0: no barriers)
    gemm_vector: int = 1                # register tiles: columns per work-item block as one float vector of this
                                        # many lanes (1: scalars; the device vectorises across work-items)

    @staticmethod
    def for_caps(caps) -> "Knobs":
        """Defaults for a device: work-groups within its limit, a tree reduction that fits its shared memory."""
        wg = max(1, min(caps.max_work_group_size, 64))
        threads = 1
        while threads * 2 <= min(caps.max_work_group_size, 256) and threads * 2 * 8 <= caps.local_memory_bytes:
            threads *= 2
        fits = lambda t: t * t <= caps.max_work_group_size and 2 * t * t * 4 <= caps.local_memory_bytes  # noqa: E731
        tile = next((t for t in (16, 8) if fits(t)), 1)
        shared = caps.has("dedicated_local_memory")
        vw = max([w for w in caps.vector_widths if w <= max(4, caps.lanes)] or [1])
        # GEMV: a GPU splits k over 64 work-items (coalesced vector loads, a shared-memory tree) for 4 outputs; a CPU
        # device (PoCL) runs one output per work-item, its k loop in the widest vectors: no tree, no barriers
        gt = 1
        while shared and gt < 64 and gt * 8 <= caps.max_work_group_size and gt * 32 <= caps.local_memory_bytes:
            gt *= 2
        return Knobs(vector_width=vw, gemv_threads=gt, gemv_outputs=4 if gt > 1 else max(1, min(16, wg)),
                     gemv_max_rows=4 if caps.max_work_group_size > 1 else 0,
                     work_group_size=wg, reduce_threads=threads, reduce_max_outputs=max(4, 4 * caps.threads),
                     gemm_tile=tile, gemm_shared=shared, window_width=max(1, min(caps.max_work_group_size, 16)),
                     window_cols=4 if caps.max_work_group_size > 1 else 0,    # work-groups of one (WebGL): no
                     extern_computes=shared,                                    # row work-groups, one-dim grids
                     window_local_bytes=caps.local_memory_bytes // 2 if shared else 0)


def _pow2(lo: int, hi: int) -> list:
    return [1 << i for i in range(lo.bit_length() - 1, hi.bit_length()) if lo <= 1 << i <= hi]


KNOB_DOCS = {
    "work_group_size": "work-items per work-group of a one-per-output launch",
    "reduce_threads": "work-items reducing one output together (a tree in shared memory; < 8: no tree)",
    "reduce_min_length": "rows at least this long reduce in a work-group",
    "reduce_max_outputs": "... when there are at most this many outputs",
    "gemm_tile": "a tiled GEMM's work-group is tile x tile (1: no tiled GEMM)",
    "gemm_shared": "stage GEMM blocks in shared memory (False: register tiles)",
    "gemm_rows": "rows of a work-item's register tile",
    "gemm_cols": "columns of a work-item's register tile",
    "window_width": "work-items along an image row of a windowed reduction (depthwise, pool)",
    "window_cols": "outputs of the row per work-item (0: no window schedule)",
    "window_max": "the largest window (reduction length) the window schedule takes",
    "window_local_bytes": "shared memory a window work-group may stage its input tile in (0: none)",
    "extern_computes": "an extern op with a compute form runs as that compute (False: its CPU loop IR)",
    "vector_width": "lanes of the vector loads a schedule emits (1: scalar loads)",
    "gemv_max_rows": "a matrix product with at most this many rows is a GEMV (0: none)",
    "gemv_threads": "work-items along k per GEMV output (> 1: a tree)",
    "gemv_outputs": "outputs per GEMV work-group",
    "gemm_tile_rows": "register-tiled work-group: work-items along the rows (0: gemm_tile, square)",
    "gemm_lockstep": "register tiles: a barrier every this many steps of the outermost reduce loop, its inner loops "
                     "unrolled, so a CPU device (PoCL) vectorises each step across the work-items (0: none)",
    "gemm_vector": "register tiles: each work-item's column blocks are float vectors of this many lanes (1: scalars)",
}


def knob_space(caps) -> Space:
    """The search space of the GPU schedules on a device: every field of Knobs with its choices (the default from
    for_caps first) and the constraints of the device (work-group size, local memory, registers)."""
    d = Knobs.for_caps(caps)
    wg, local = caps.max_work_group_size, caps.local_memory_bytes
    choices = {
        "work_group_size": _pow2(1, min(wg, 256)),
        "reduce_threads": [1] + _pow2(8, min(wg, 256)),
        "reduce_min_length": [256, 512, 2048, 4096],
        "reduce_max_outputs": [4, 16, 64, 256, 1024],
        "gemm_tile": [1] + _pow2(4, 32),
        "gemm_shared": [True, False],
        "gemm_rows": [1, 2, 4, 8],
        "gemm_cols": [1, 2, 4, 8],
        "window_width": _pow2(1, min(wg, 64)),
        "window_cols": [0, 1, 2, 4, 8],
        "window_max": [16, 32, 64, 128],
        "window_local_bytes": [0, local // 4, local // 2],
        "extern_computes": [True, False],
        "vector_width": sorted({1, *(w for w in caps.vector_widths if w <= 16)}),
        "gemv_max_rows": [0, 1, 2, 4, 8],
        "gemv_threads": _pow2(1, 64),
        "gemv_outputs": [1, 2, 4, 8, 16, 32],
        "gemm_tile_rows": [0, *_pow2(1, 32)],
        "gemm_lockstep": [0, 1, 2, 4, 8] if wg > 1 else [0],
        "gemm_vector": sorted({1, *(w for w in caps.vector_widths if w <= 16)}),
    }
    knobs = {n: Knob(n, tuple(dict.fromkeys([getattr(d, n), *c])), getattr(d, n), KNOB_DOCS[n])
             for n, c in choices.items()}
    constraints = (
        Constraint(f"work_group_size <= the device's {wg} work-items", lambda c: c["work_group_size"] <= wg),
        Constraint(f"reduce_threads <= {wg} work-items and 8 bytes each fit {local} B of local memory",
                   lambda c: c["reduce_threads"] <= wg and c["reduce_threads"] * 8 <= local),
        Constraint(f"gemm_tile^2 <= {wg} work-items; staged blocks (2 x tile^2 floats) fit local memory",
                   lambda c: c["gemm_tile"] ** 2 <= wg and (not c["gemm_shared"] or 8 * c["gemm_tile"] ** 2 <= local)),
        Constraint(f"gemm_tile x gemm_tile_rows <= {wg} work-items",
                   lambda c: c["gemm_tile"] * (c["gemm_tile_rows"] or c["gemm_tile"]) <= wg),
        Constraint("gemm_rows x gemm_cols <= 32 accumulators per work-item, x gemm_vector lanes <= 128 (registers)",
                   lambda c: c["gemm_rows"] * c["gemm_cols"] <= 32
                   and c["gemm_rows"] * c["gemm_cols"] * c["gemm_vector"] <= 128),
        Constraint(f"window_width <= {wg} work-items", lambda c: c["window_width"] <= wg),
        Constraint(f"gemv_threads x gemv_outputs <= {wg} work-items; its tree fits local memory",
                   lambda c: c["gemv_threads"] * c["gemv_outputs"] <= wg
                   and c["gemv_threads"] * c["gemv_outputs"] * 8 <= max(local, 8)),
    )
    return Space("gpu", knobs, constraints)


def knobs_of(caps, config: dict | None = None) -> Knobs:
    """The device's default Knobs with the values a config names (fields it does not name keep their default); a
    config outside knob_space(caps) (an unknown knob, a value not among its choices, a broken constraint: a hand-edited
    log) is not applied: the defaults are."""
    d = Knobs.for_caps(caps)
    return dataclasses.replace(d, **config) if config and knob_space(caps).valid(config) else d


def root_kind(conv, t: Tensor, knobs: Knobs) -> str:
    if t.extern is not None:
        return "extern"
    if gemv.applies(conv, t, knobs):
        return "gemv"
    if tiled_gemm.applies(conv, t, knobs):
        return "gemm"
    if window.applies(conv, t, knobs):
        return "window"
    if knobs.reduce_threads >= 8 and tree_reduction.applies(conv, t, knobs):
        return "reduce"
    return "compute"


SCHEDULES = {"compute": one_per_output, "reduce": tree_reduction, "gemm": tiled_gemm, "gemv": gemv, "window": window,
             "extern": extern_launches}


def lower_group_device(name: str, roots: list, out_bufs: list, in_bufs: dict, caps, knobs: Knobs | None = None) -> list:
    """roots[i] is stored into out_bufs[i]; in_bufs maps placeholder Tensors to Buffers; returns the launches."""
    knobs = knobs or Knobs.for_caps(caps)
    conv = DeviceConverter(dict(in_bufs))
    bodies, done = [], set()
    for t, ob in zip(roots, out_bufs):
        if t.extern is not None and "compute" in t.attrs and knobs.extern_computes:    # a compute form too
            t = t.attrs["compute"]
        if t.extern is not None:
            if t.extern in done:
                continue
            done.add(t.extern)
            outs = sorted((r.index, b) for r, b in zip(roots, out_bufs) if r.extern is t.extern)
            bodies += extern_launches(conv, t, [b for _, b in outs], [in_bufs[x] for x in t.inputs], caps, knobs)
            continue
        if t.is_placeholder:        # an alias of an input: copy it
            src = t
            t = te.compute(src.shape, lambda *i: src[i], "copy")
        bodies += lookup("gpu", root_kind(conv, t, knobs))(conv, t, ob, knobs)
    params = list(out_bufs) + list(dict.fromkeys(in_bufs.values())) + conv.scratches
    kernels = []
    for k, body in enumerate(bodies):
        body = scalarize(body, caps.vector_widths)     # native vectors stay where the language has them
        bits = max(caps.index_bits, index_bits_of(params))    # the device's width, 64 where a buffer needs it
        kernels.append(Kernel(f"{name}_{k}" if len(bodies) > 1 else name, params, body, 0, bits,
                              launch_of(body)))
    return kernels
