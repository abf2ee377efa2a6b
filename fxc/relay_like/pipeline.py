"""The graph pass pipeline: one readable list. FXC_DEBUG=1 prints a timeline, 2 the graph after each pass."""
from __future__ import annotations

import time

from .passes import (eliminate_common_subexpr, eliminate_dead_code, fold_constants, fold_scale_axis, infer_types,
                     materialize_outputs, pack_weights, simplify, use_blocked_layout, use_winograd)
from .passes.use_bf16 import use_bf16, use_bf16_blocked

PRECISIONS = ("fp32", "bf16")   # bf16: conv/matmul over weights take bfloat16 operands, accumulate in float32

PIPELINE = [
    infer_types,
    simplify,
    fold_scale_axis,
    use_winograd,
    use_bf16,               # precision="bf16" only
    pack_weights,
    use_blocked_layout,
    use_bf16_blocked,       # precision="bf16" only
    fold_constants,
    eliminate_common_subexpr,
    eliminate_dead_code,
    materialize_outputs,
]


def run_pipeline(g, debug: int = 0, log=print, precision: str = "fp32", bf16_everywhere: bool = True,
                 bf16_direct: bool = False, weights_vary: bool = False, caps=None):
    """caps: the target's capabilities (None: this host's), read by the CPU passes (use_winograd, pack_weights).
    precision "bf16": use_bf16 and use_bf16_blocked run (on every conv/matmul over weights, or with
    bf16_everywhere=False only on those that stream their weight); bf16_direct (its direct convs at twice the
    float32 rate): Winograd keeps only the layers where it still beats them; weights_vary (a training step's
    graphs): and only those where it beats them with its weight transform paid on every call."""
    bf16_passes = (use_bf16, use_bf16_blocked)
    for p in PIPELINE:
        if p in bf16_passes and precision != "bf16":
            continue
        t0 = time.perf_counter()
        if p in bf16_passes:
            g = p(g, bf16_everywhere)
        elif p is use_winograd:
            g = use_winograd(g, bf16_direct, weights_vary, caps)
        elif p is pack_weights:
            g = pack_weights(g, caps)
        else:
            g = p(g)
        if debug >= 1:
            log(f"[fxc] pass {p.__name__:<28} {1e3 * (time.perf_counter() - t0):7.2f} ms  {len(g.nodes)} nodes")
        if debug >= 2:
            log(str(g))
    return g
