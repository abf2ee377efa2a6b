"""Winograd F(4x4, 3x3) convolution ops (made by the use_winograd pass from stride-1 3x3 conv2d):

    winograd_weight(w[K, C, 3, 3], blocks)        -> U[6, 6, blocks, C, 16]   U = G w G^T, output channels in
                                                     blocks of 16 lanes (zero padded), a prepack step
    conv2d_winograd(x[N, C, H, W], U, out_channels, padding, nv) -> y[N, K, H + 2ph - 2, W + 2pw - 2]
                                                     conv2d of x zero padded by `padding` (schedule: lowering/winograd.py)
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..lowering.expr import Const, as_expr, binary, compare, maximum, minimum, select
from ..lowering.winograd import ALPHA, AT, BT, G, TILE, tiles, weight_transform
from ..relay_like.graph import TensorType
from .common import rand
from .registry import Kind, OpDef, register

LANES = 16
_AT, _BT, _G = np.array(AT, np.float64), np.array(BT, np.float64), np.array(G, np.float64)


def _table(matrix, row, col, dtype) -> "te.Expr":
    """matrix[row][col] for index expressions row, col (a select chain over the flat position)."""
    flat = [float(v) for r in matrix for v in r]
    pos = row * len(matrix[0]) + col
    e = Const(flat[-1], dtype)
    for i in range(len(flat) - 2, -1, -1):
        e = select(compare("eq", pos, as_expr(i)), Const(flat[i], dtype), e)
    return e


# -- the weight transform ---------------------------------------------------------------------------------------------
def _weight_infer(types, blocks, lanes=LANES):
    w = types[0]
    if w.ndim != 4 or w.shape[2:] != (3, 3) or blocks * lanes < w.shape[0]:
        raise ShapeError(f"winograd_weight expects a [K, C, 3, 3] weight and {blocks} x {lanes} >= K, got {w.shape}")
    return [TensorType((ALPHA, ALPHA, blocks, w.shape[1], lanes), w.dtype)]


def _weight(w, blocks, lanes=LANES):
    shape = _weight_infer([w], blocks, lanes)[0].shape
    if lanes != LANES:
        raise ShapeError(f"winograd_weight packs output channels in {LANES} lanes, got lanes={lanes}")
    return te.extern([(shape, w.dtype)], [w], weight_transform(w.shape[0], w.shape[1], blocks, w.dtype),
                     "winograd_weight")[0]


def _weight_ref(w, blocks, lanes=LANES):
    u = np.einsum("ai,kcij,bj->abkc", _G, w.astype(np.float64), _G)
    u = np.pad(u, [(0, 0), (0, 0), (0, blocks * lanes - w.shape[0]), (0, 0)])
    u = u.reshape(ALPHA, ALPHA, blocks, lanes, w.shape[1]).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(u).astype(w.dtype)


register(OpDef("winograd_weight", Kind.OPAQUE, _weight_infer, _weight_ref, _weight, {}, None,
               lambda rng: [([rand(rng, (5, 3, 3, 3))], {"blocks": 1}),
                            ([rand(rng, (40, 16, 3, 3))], {"blocks": 4})],
               ("float32",), doc="Winograd F(4x4,3x3) weight transform G w G^T, output channels packed in lanes."))


# -- the convolution --------------------------------------------------------------------------------------------------
def _conv_infer(types, out_channels, padding=(1, 1), nv=1):
    x, u = types
    ph, pw = padding
    if x.ndim != 4 or u.ndim != 5 or u.shape[:2] != (ALPHA, ALPHA) or u.shape[3] != x.shape[1] \
            or u.shape[2] * u.shape[4] < out_channels or x.shape[2] + 2 * ph < 3 or x.shape[3] + 2 * pw < 3:
        raise ShapeError(f"conv2d_winograd expects NCHW input and a [6, 6, K/16, C, 16] weight, got {x.shape} and {u.shape}")
    return [TensorType((x.shape[0], out_channels, x.shape[2] + 2 * ph - 2, x.shape[3] + 2 * pw - 2), x.dtype)]


def _conv(x, u, out_channels, padding=(1, 1), nv=1):
    """y = A^T [U . (B^T d B)] A per 4x4 output tile, written as one reduction over (c, xi1, xi2, a1, a2)."""
    n_, c_, h_, w_ = x.shape
    (_, _, oh_, ow_) = _conv_infer([x, u], out_channels, padding, nv)[0].shape
    ph, pw = padding
    lanes = u.shape[4]
    rc, r1, r2 = te.reduce_axis(c_, "rc"), te.reduce_axis(ALPHA, "e1"), te.reduce_axis(ALPHA, "e2")
    ra, rb = te.reduce_axis(ALPHA, "a1"), te.reduce_axis(ALPHA, "a2")

    def body(n, k, h, w):
        e1, e2, a1, a2 = r1[0], r2[0], ra[0], rb[0]
        y = binary("idiv", h, as_expr(TILE)) * TILE + a1 - ph
        xw = binary("idiv", w, as_expr(TILE)) * TILE + a2 - pw
        inside = binary("and", binary("and", compare("ge", y, as_expr(0)), compare("lt", y, as_expr(h_))),
                        binary("and", compare("ge", xw, as_expr(0)), compare("lt", xw, as_expr(w_))))
        xv = x[n, rc[0], minimum(maximum(y, as_expr(0)), as_expr(h_ - 1)), minimum(maximum(xw, as_expr(0)), as_expr(w_ - 1))]
        d = select(inside, xv, Const(0.0, x.dtype))
        uv = u[e1, e2, binary("idiv", k, as_expr(lanes)), rc[0], binary("imod", k, as_expr(lanes))]
        coef = (_table(AT, binary("imod", h, as_expr(TILE)), e1, x.dtype) * _table(AT, binary("imod", w, as_expr(TILE)), e2, x.dtype)
                * _table(BT, e1, a1, x.dtype) * _table(BT, e2, a2, x.dtype))
        return te.sum_(coef * uv * d, [rc, r1, r2, ra, rb])
    flops = 2 * n_ * out_channels * oh_ * ow_ * c_ * 9
    return te.compute((n_, out_channels, oh_, ow_), body, "conv2d_winograd",
                      {"schedule": "conv2d_winograd", "x": x, "u": u, "padding": tuple(padding), "nv": nv,
                       "flops": flops})


def _conv_ref(x, u, out_channels, padding=(1, 1), nv=1):
    n_, c_, h_, w_ = x.shape
    ph, pw = padding
    oh_, ow_ = h_ + 2 * ph - 2, w_ + 2 * pw - 2
    th, tw = tiles(oh_), tiles(ow_)
    xp = np.zeros((n_, c_, th * TILE + 2, tw * TILE + 2))
    xp[:, :, ph:ph + h_, pw:pw + w_] = x
    d = np.stack([np.stack([xp[:, :, i * TILE:i * TILE + ALPHA, j * TILE:j * TILE + ALPHA] for j in range(tw)], 2)
                  for i in range(th)], 2)                                     # [n, c, th, tw, 6, 6]
    v = np.einsum("ai,nctuij,bj->nctuab", _BT, d, _BT)
    uk = u.astype(np.float64).transpose(0, 1, 2, 4, 3).reshape(ALPHA, ALPHA, -1, c_)[:, :, :out_channels]
    m = np.einsum("abkc,nctuab->nktuab", uk, v)
    y = np.einsum("ia,nktuab,jb->nktiuj", _AT, m, _AT).reshape(n_, out_channels, th * TILE, tw * TILE)
    return y[:, :, :oh_, :ow_].astype(x.dtype)


def _sample(rng, n, c, k, h, w, padding, nv):
    blocks = -(-(-(-k // LANES)) // nv) * nv
    return ([rand(rng, (n, c, h, w)), _weight_ref(rand(rng, (k, c, 3, 3)), blocks)],
            {"out_channels": k, "padding": padding, "nv": nv})


register(OpDef("conv2d_winograd", Kind.OUT_FUSABLE, _conv_infer, _conv_ref, _conv, {}, None,
               lambda rng: [_sample(rng, 1, 16, 16, 9, 10, (1, 1), 1),
                            _sample(rng, 2, 32, 40, 7, 13, (1, 1), 3),
                            _sample(rng, 1, 16, 20, 8, 8, (0, 0), 2)],
               ("float32",), doc="3x3 stride-1 conv2d by Winograd F(4x4,3x3) over a winograd_weight operand."))
