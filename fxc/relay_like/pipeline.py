"""The graph pass pipeline: one readable list. FXC_DEBUG=1 prints a timeline, 2 the graph after each pass.

`pipeline_for(target)` is the list for a target: the CPU passes (Winograd, weight packing, blocked layouts and
bf16, which rewrite the graph for a CPU's vector registers) run only where the target is a CPU."""
from __future__ import annotations

import time

from .passes import (
    eliminate_common_subexpr,
    eliminate_dead_code,
    expand_opaque,
    fold_constants,
    fold_scale_axis,
    infer_types,
    materialize_outputs,
    pack_weights,
    simplify,
    use_blocked_layout,
    use_channel_blocks,
    use_winograd,
)
from .passes.use_bf16 import use_bf16, use_bf16_blocked

PRECISIONS = ("fp32", "bf16")   # bf16: conv/matmul over weights take bfloat16 operands, accumulate in float32

PIPELINE = [
    infer_types,
    simplify,
    expand_opaque,          # targets without scatter (WebGL) only
    fold_scale_axis,
    use_winograd,
    use_bf16,               # precision="bf16" only
    pack_weights,
    use_blocked_layout,
    use_channel_blocks,     # devices whose Caps name a channel block (webgl) only
    use_bf16_blocked,       # precision="bf16" only
    fold_constants,
    eliminate_common_subexpr,
    eliminate_dead_code,
    materialize_outputs,
]


CPU_PASSES = (use_winograd, use_bf16, pack_weights, use_blocked_layout, use_bf16_blocked)


def pipeline_for(target=None) -> list:
    """The passes for `target` (a fxc.target.Target; None: the host CPU), in order."""
    cpu = target is None or target.is_cpu
    return [p for p in PIPELINE if cpu or p not in CPU_PASSES]


def run_pipeline(g, debug: int = 0, log=print, precision: str = "fp32", bf16_everywhere: bool = True,
                 bf16_direct: bool = False, weights_vary: bool = False, target=None, winograd: str = "auto",
                 blocked_layout: bool = True):
    """target: a fxc.target.Target (None: the host CPU); it chooses the passes (pipeline_for) and its capabilities
    are read by the CPU passes (use_winograd, use_bf16, pack_weights, use_blocked_layout: lanes and registers).
    precision "bf16": use_bf16 and use_bf16_blocked run (on every conv/matmul over weights, or with
    bf16_everywhere=False only on those that stream their weight); bf16_direct (its direct convs at twice the
    float32 rate): Winograd keeps only the layers where it still beats them; weights_vary (a training step's
    graphs): and only those where it beats them with its weight transform paid on every call.
    winograd ("auto", "off", "all") and blocked_layout (bool): the build options of those names (for measuring
    one choice against its absence)."""
    bf16_passes = (use_bf16, use_bf16_blocked)
    caps = target.caps if target is not None else None
    for p in pipeline_for(target):
        if p in bf16_passes and precision != "bf16":
            continue
        t0 = time.perf_counter()
        if p is use_bf16:
            g = use_bf16(g, bf16_everywhere, caps, blocked_layout)
        elif p in bf16_passes:
            g = p(g, bf16_everywhere)
        elif p is use_winograd:
            g = use_winograd(g, bf16_direct, weights_vary, caps, winograd)
        elif p is use_blocked_layout:
            g = use_blocked_layout(g, caps, blocked_layout)
        elif p in (pack_weights, expand_opaque, use_channel_blocks):
            g = p(g, caps)
        else:
            g = p(g)
        if debug >= 1:
            log(f"[fxc] pass {p.__name__:<28} {1e3 * (time.perf_counter() - t0):7.2f} ms  {len(g.nodes)} nodes")
        if debug >= 2:
            log(str(g))
    return g
