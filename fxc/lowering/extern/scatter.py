"""The loop IR of index_put and scatter (fxc/ops/index.py): out = x copied (whole vectors, a scalar tail), then a
loop nest over the indices storing each value at its checked data-dependent position (fxc.errors.IndexOutOfRangeError
for one out of range, as eager PyTorch)."""
from __future__ import annotations

import math

from ...symbolic.expr import Broadcast, Var, VecLoad, as_expr, maximum, minimum
from .. import te
from ..loop_ir import For, Store, seq
from ..lower import strides_of


def nest(shape, body, parallel: bool = False):
    """Loops over `shape`; body(vars) -> statement. parallel: the outermost loop runs on threads."""
    vs = [Var(f"n{d}_") for d in range(len(shape))]
    s = body(vs)
    for d in reversed(range(len(shape))):
        s = For(vs[d], shape[d], s, "parallel" if parallel and d == 0 and shape[0] > 1 else "serial")
    return s


def flat(idx, shape):
    """Flat row-major offset of a multi-index; size-1 dims are broadcast (read at 0)."""
    f = as_expr(0)
    for i, n, st in zip(idx, shape, strides_of(shape)):
        if n != 1:
            f = f + i * st
    return f


def bload(buf, shape, idx):
    """Load buffer `buf` of `shape` at broadcast index `idx` (trailing-aligned, like numpy)."""
    off = len(idx) - len(shape)
    return buf[flat(idx[off:], shape)]


def copy_stmt(dst, src, n: int, fill: bool = False):
    """dst[:] = src[:], or with fill dst[:] = src[0]: whole vectors of 16 (parallel when large), then a scalar tail."""
    if not n:
        return None
    i, k = Var("c"), Var("ct")
    lanes, full = 16, n // 16 * 16
    value = (lambda at, w: Broadcast(src[0], w)) if fill else (lambda at, w: VecLoad(src, at, w))
    body = For(i, full // lanes, Store(dst, i * lanes, value(i * lanes, lanes)),
               "parallel" if n >= 1 << 16 else "serial") if full else None
    tail = For(k, n - full, Store(dst, k + full, src[0] if fill else src[k + full])) if n > full else None
    return seq(body, tail)


def index_put_loops(xshape, v_shape, idx_shapes, dims, ishape, pos: int, nb: int, rest, accumulate: bool, fill: bool):
    """lower(outs, ins) of index_put (ins: x, values, the indices): out = x (fill: x[0] everywhere, x broadcast to
    xshape), then out[idx_0[i], .., idx_k[i]] = values[i] (or += with accumulate) for every i of the broadcast index
    shape `ishape`, whose block of nb dims sits at `pos`; `rest`: the un-indexed dims in order."""
    def lower(outs, ins):
        out, xb, vb, ib = outs[0], ins[0], ins[1], ins[2:]

        def body(i):
            bi = i[pos:pos + nb]
            others = iter(i[:pos] + i[pos + nb:])
            coords = {d: next(others) for d in rest}
            for ishp, b_, d in zip(idx_shapes, ib, dims):
                coords[d] = te.check_index(bload(b_, ishp, bi), xshape[d], "index_put", wrap=True)
            at = flat([coords[d] for d in range(len(xshape))], xshape)
            val = bload(vb, v_shape, i)
            return Store(out, at, out[at] + val if accumulate else val)
        return seq(copy_stmt(out, xb, math.prod(xshape), fill=fill), nest(ishape, body))
    return lower


def scatter_loops(x_shape, idx_shape, src_shape, d: int, reduce, reset):
    """lower(outs, ins) of scatter along dim d (ins: x, idx, src): out = x, then out[.., idx[i], ..] = src[i] (or
    combined by `reduce`: sum, prod, amax, amin); reset: the reduction's identity that scattered-to positions start
    from (include_self=False), or None."""
    def lower(outs, ins):
        out, xb, ib, sb = outs[0], ins[0], ins[1], ins[2]

        def target(i):
            j = te.check_index(ib[flat(i, idx_shape)], x_shape[d], "scatter")
            return flat(list(i[:d]) + [j] + list(i[d + 1:]), x_shape)

        def update(i):
            at, val = target(i), sb[flat(i, src_shape)]
            if reduce is None:
                return Store(out, at, val)
            comb = {"sum": lambda a: a + val, "prod": lambda a: a * val,
                    "amax": lambda a: maximum(a, val), "amin": lambda a: minimum(a, val)}[reduce]
            return Store(out, at, comb(out[at]))
        starts = None
        if reset is not None:   # scattered-to positions start from the identity
            starts = nest(idx_shape, lambda i: Store(out, target(i), reset))
        return seq(copy_stmt(out, xb, math.prod(x_shape)), starts, nest(idx_shape, update))
    return lower
