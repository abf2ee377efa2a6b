"""expand_opaque: on a target whose work-items cannot store anywhere but their own output element (Caps.scatter
False: WebGL's fragment shaders), the opaque ops whose kernels are hand-written loop IR become compositions of
registry ops that each compute one output element from their inputs (reductions with the loop inside).

    layer_norm(x, w, b)      -> the moments of x - x[first] in one reduction (sum of d and d*d), rsqrt,
                                (x - mean) * rstd * w + b
                                (its outputs (out, mean, rstd) as the kernel gives them)
    softmax(x, dim, safe)    -> m = amax(x); exp(x - m - log(sum(exp(x - m))))  (three draws; safe: -inf rows give
                                zeros)
    log_softmax(x, dim)      -> x - m - log(sum(exp(x - m)))
    max_pool2d(x)            -> pad(x, -inf) then the maximum of its KHxKW strided slices (NaN propagates as eager);
                                where the Caps name a channel block, a float32 one is left to use_channel_blocks
                                (max_pool2d_blocked on NCHWkc; it expands those it does not block)

Takes a typed graph; returns the graph with those nodes replaced (their output Values keep
their ids, names and users). Other targets get the graph unchanged: their single kernels are faster.
"""
from __future__ import annotations

import math

import numpy as np

from ...ops.registry import get_op
from ..builder import Builder
from ..graph import Graph


def _layer_norm(b, x, *affine, ndims, eps, weight, bias):
    """One reduction draw for the row's moments, one elementwise draw for the output, and one of a value a row for
    its first element (was three reductions: the mean, its correction, the variance; each a fragment per four rows,
    on SwiftShader mostly idle threads, and the output). The moments are
    of d = x - k, k the row's first element (the shifted-data algorithm: no cancellation while k is within a few
    standard deviations of the mean; a row of equal values gives d = 0, so exactly its value as the mean and a zero
    variance, as eager's Welford moments do): s = sum over the row of [d, d*d, 0, 0], four outputs a row (one
    texel: the row is the same in a fragment's four lanes, read once for them), then mean = k + s0/n,
    var = max(s1/n - (s0/n)^2, 0)."""
    nd = x.type.ndim
    axes = tuple(range(nd - ndims, nd))
    n = math.prod(x.shape[a] for a in axes)
    k = x
    for a in axes:
        k = b.call("slice", [k], dim=a, start=0, end=1, step=1)
    # d is written four ways (x - k, -(k - x), x + -k, -k + x: the same values) so that no node of a row's size has
    # two readers: each is inlined into its reader (the moments' draw, the output's draw), not a tensor of its own
    col = tuple(x.shape) + (1,)
    nk = b.call("neg", [k])
    sq = b.call("mul", [b.call("add", [x, nk]), b.call("add", [nk, x])])
    d1, d2 = b.call("reshape", [b.call("neg", [b.call("sub", [k, x])])], shape=col), b.call("reshape", [sq], shape=col)
    s = b.call("sum", [b.call("pad", [b.call("cat", [d1, d2], dim=nd)], pad=(0, 2))], axes=axes, keepdim=True)
    d = b.call("sub", [x, k])
    kept = tuple(k.shape)
    m1 = b.call("mul", [b.call("reshape", [b.call("slice", [s], dim=nd, start=0, end=1, step=1)], shape=kept),
                        1.0 / n])
    m2 = b.call("mul", [b.call("reshape", [b.call("slice", [s], dim=nd, start=1, end=2, step=1)], shape=kept),
                        1.0 / n])
    var = b.call("maximum", [b.call("sub", [m2, b.call("mul", [m1, m1])]), 0.0])
    mean = b.call("add", [k, m1])
    rstd = b.call("rsqrt", [b.call("add", [var, float(eps)])])
    out = b.call("mul", [b.call("sub", [d, m1]), rstd])
    if weight:
        out = b.call("mul", [out, affine[0]])
    if bias:
        out = b.call("add", [out, affine[-1]])
    return out, mean, rstd


def _softmax(log: bool):
    def expand(b, x, dim, safe=False):
        axes = (dim % x.type.ndim,)
        m = b.call("amax", [x], axes=axes, keepdim=True)
        zero = b.scalar(0.0, x.dtype)
        if safe:            # a row of -inf only: exp(-inf - 0) = 0 everywhere, a sum of 0, and zeros out
            m = b.call("where", [b.call("eq", [m, -math.inf]), zero, m])
        # three draws: m; the sum with exp(x + -m) inside it; the output. x + -m is x - m exactly, but another
        # node: as one node (or exp(x - m) / s), it would be a tensor of its own, read by two consumers (a draw more)
        s = b.call("sum", [b.call("exp", [b.call("add", [x, b.call("neg", [m])])])], axes=axes, keepdim=True)
        lse = b.call("sub", [b.call("sub", [x, m]), b.call("log", [s])])
        if log:
            return (lse,)
        out = b.call("exp", [lse])
        if safe:
            out = b.call("where", [b.call("eq", [s, 0.0]), zero, out])
        return (out,)
    return expand


def _max_pool2d(b, x, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = get_op("max_pool2d").infer([x.type], kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                                        ceil_mode=ceil_mode)[0].shape[-2:]
    h, w = x.shape[-2:]
    extra_h = max((oh - 1) * sh + dh * (kh - 1) + 1 - h - ph, 0)    # ceil_mode's last window reaches past the edge
    extra_w = max((ow - 1) * sw + dw * (kw - 1) + 1 - w - pw, 0)
    # the padding never wins: below every value of the dtype (int8's -2**63 wrapped to 0 and beat negative windows)
    low = -math.inf if x.dtype in ("float32", "float64") else int(np.iinfo(x.dtype).min)
    if ph or pw or extra_h or extra_w:
        x = b.call("pad", [x], pad=(pw, extra_w, ph, extra_h), value=float(low) if low == -math.inf else low)
    nd = x.type.ndim
    out = None
    for a in range(kh):
        for c in range(kw):
            v = b.call("slice", [x], dim=nd - 2, start=a * dh, end=a * dh + sh * (oh - 1) + 1, step=sh)
            v = b.call("slice", [v], dim=nd - 1, start=c * dw, end=c * dw + sw * (ow - 1) + 1, step=sw)
            out = v if out is None else b.call("maximum", [out, v])
    return (out,)


EXPANSIONS = {"layer_norm": _layer_norm, "softmax": _softmax(False), "log_softmax": _softmax(True),
              "max_pool2d": _max_pool2d}


def _pool_for_blocks(n, caps) -> bool:
    return n.op == "max_pool2d" and getattr(caps, "channel_block", 0) > 1 and n.outputs[0].dtype == "float32" \
        and n.inputs[0].type.ndim == 4


def expand_opaque(g, ctx):
    """Only where the target's Caps.scatter is False does anything change; a max pool that use_channel_blocks may
    block is left to it."""
    return expand_ops(g, ctx.caps, pools_for_blocks=True)


def expand_ops(g, caps, pools_for_blocks: bool):
    """The expansion for a target of Caps `caps`. pools_for_blocks: leave the max pools that use_channel_blocks may
    block (it expands the rest with False)."""
    if caps.scatter or not any(n.op in EXPANSIONS for n in g.nodes):
        return g
    nodes = []
    for n in g.nodes:
        fn = EXPANSIONS.get(n.op)
        if fn is None or (pools_for_blocks and _pool_for_blocks(n, caps)):
            nodes.append(n)
            continue
        b = Builder(Graph())
        outs = fn(b, *n.inputs, **n.attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        swap = {new.id: old for old, new in zip(n.outputs, outs)}
        for m in b.graph.nodes:     # the replacement keeps the original output Values (ids, names, users valid)
            m.inputs = [swap.get(v.id, v) for v in m.inputs]
            for i, v in enumerate(m.outputs):
                if v.id in swap:
                    m.outputs[i] = swap[v.id]
                    m.outputs[i].node, m.outputs[i].index = m, i
        nodes += b.graph.nodes
    g.nodes = nodes
    return g
