"""The graph pass pipeline: one readable list of graph passes, then the plan steps (hoisting, fusion, memory).

Takes a typed Graph (a capture's) and a PassContext (the target and the build's choices); run_passes returns the
graph rewritten for the target, plan_graph its Planned form (groups, prepack split, memory plan). Every step runs for
every target: a step that does not apply to the target or the options returns its input unchanged. FXC_DEBUG=1
prints a timeline line per step, 2 also the graph after each pass."""
from __future__ import annotations

import time

from .context import PassContext
from .passes import (
    eliminate_common_subexpr,
    eliminate_dead_code,
    expand_opaque,
    fold_constants,
    fold_scale_axis,
    fuse_groups,
    hoist_weights,
    infer_types,
    materialize_outputs,
    pack_weights,
    partition_external,
    plan_buffers,
    quantize_chains,
    simplify,
    split_prepack,
    use_bf16,
    use_bf16_blocked,
    use_blocked_layout,
    use_channel_blocks,
    use_int8,
    use_int8_blocks,
    use_winograd,
)
from .planned import Planned

PRECISIONS = ("fp32", "bf16")   # bf16: conv/matmul over weights take bfloat16 operands, accumulate in float32

PIPELINE = [                    # pass(graph, ctx) -> graph
    infer_types,
    simplify,
    quantize_chains,            # build option quantized="int8" (the default): quantised chains -> integer ops
    use_int8,                   # CPU only: integer ops over int8 weights -> packed int8 kernels
    use_int8_blocks,            # CPU only (build option blocked_layout): their activations in channel blocks
    expand_opaque,              # targets without scatter (webgl) only
    fold_scale_axis,
    use_winograd,               # CPU only (build option winograd)
    use_bf16,                   # CPU, precision="bf16" only
    pack_weights,               # CPU only
    use_blocked_layout,         # CPU only (build option blocked_layout)
    use_channel_blocks,         # devices whose Caps name a channel block (webgl) only
    use_bf16_blocked,           # CPU, precision="bf16" only
    fold_constants,
    eliminate_common_subexpr,
    eliminate_dead_code,
    materialize_outputs,
]

PLAN_STEPS = [                  # step(planned, ctx) -> planned
    hoist_weights,              # the weight-only values: computed once per weight version (none on webgl)
    partition_external,         # the regions the target's -libs= run (docs/byoc.md; none without -libs=)
    fuse_groups,                # fused groups, one kernel each (build option fuse)
    split_prepack,              # prepack groups / per-call groups, reshapes as views
    plan_buffers,               # the per-call buffers' offsets in one workspace
]


def _timed(step, x, ctx, label: str, size):
    t0 = time.perf_counter()
    x = step(x, ctx)
    if ctx.debug >= 1:
        ctx.log(f"[fxc] {label} {step.__name__:<28} {1e3 * (time.perf_counter() - t0):7.2f} ms  {size(x)}")
    return x


def run_passes(g, ctx: PassContext):
    """g after every pass of PIPELINE (FXC_DEBUG 2: the graph after each)."""
    for k, p in enumerate(PIPELINE, 1):
        g = _timed(p, g, ctx, "pass", lambda g: f"{len(g.nodes)} nodes")
        if ctx.debug >= 2:
            ctx.log(str(g))
        if ctx.dump is not None:
            ctx.dump(f"graph_{k:02d}_{p.__name__}.txt", str(g))
    return g


def plan_graph(g, ctx: PassContext) -> Planned:
    """The Planned form of g (a graph run_passes made) after every step of PLAN_STEPS."""
    planned = Planned(g)
    for step in PLAN_STEPS:
        planned = _timed(step, planned, ctx, "plan", lambda p: f"{len(p.groups)} groups")
    return planned

