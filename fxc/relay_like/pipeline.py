"""The graph pass pipeline: one readable list. FXC_DEBUG=1 prints a timeline, 2 the graph after each pass."""
from __future__ import annotations

import time

from .passes import (eliminate_common_subexpr, eliminate_dead_code, fold_constants, infer_types,
                     materialize_outputs, pack_weights, simplify, use_winograd)

PIPELINE = [
    infer_types,
    simplify,
    use_winograd,
    pack_weights,
    fold_constants,
    eliminate_common_subexpr,
    eliminate_dead_code,
    materialize_outputs,
]


def run_pipeline(g, debug: int = 0, log=print):
    for p in PIPELINE:
        t0 = time.perf_counter()
        g = p(g)
        if debug >= 1:
            log(f"[fxc] pass {p.__name__:<28} {1e3 * (time.perf_counter() - t0):7.2f} ms  {len(g.nodes)} nodes")
        if debug >= 2:
            log(str(g))
    return g
