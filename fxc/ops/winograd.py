"""Winograd F(m x m, 3x3) convolution ops, m = 4 or 2 (made by the use_winograd pass from stride-1 3x3 conv2d):

    winograd_weight(w[K, C, 3, 3], blocks, lanes L, tile m) -> U[a, a, blocks, C, L]  U = G w G^T (a = m + 2),
                                                     output channels in blocks of L lanes (zero padded; L: the
                                                     target's vector width, use_winograd), a prepack step
    winograd_weight(w, scale[K], ..)                 U = G (w[k] scale[k]) G^T: a batch norm folded into the
                                                     weight (fold_scale_axis) scales the transform's result
    conv2d_winograd(x[N, C, H, W], U, out_channels, padding, nv, tile m) -> y[N, K, H + 2ph - 2, W + 2pw - 2]
                                                     conv2d of x zero padded by `padding`
                                                     (schedule: lowering/schedules/cpu/winograd.py)

The algorithm (matrices, tiles, transforms, the weight transform's loop IR) is fxc/lowering/winograd.py, which
the conv's schedule shares. bf16 (precision="bf16"):
U = pack_bf16_pairs(winograd_weight(w), axis 3), int32 words [a, a, blocks, C/2, L] over
input channel pairs (C even); the kernel rounds its transformed input V to bf16 the same way and multiplies by
vdpbf16ps, accumulating in float32. The references round V and U as the kernel does.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..lowering import te
from ..lowering.winograd import MATRICES, alpha, tiles, weight_transform
from ..symbolic.expr import (
    Bf16Half,
    Const,
    as_expr,
    binary,
    compare,
    maximum,
    minimum,
    select,
)
from ..types import TensorType
from .bf16_words import bf16_pairs_ref, unpair_ref
from .common import rand
from .registry import Kind, OpDef, register


def _matrices(m: int):
    """(A^T, B^T, G) of F(m x m, 3x3) as float64 arrays."""
    if m not in MATRICES:
        raise ShapeError(f"Winograd tile must be one of {sorted(MATRICES)}, got {m}")
    return [np.array(t, np.float64) for t in MATRICES[m]]


def _table(matrix, row, col, dtype) -> "te.Expr":
    """matrix[row][col] for index expressions row, col (a select chain over the flat position)."""
    flat = [float(v) for r in matrix for v in r]
    pos = row * len(matrix[0]) + col
    e = Const(flat[-1], dtype)
    for i in range(len(flat) - 2, -1, -1):
        e = select(compare("eq", pos, as_expr(i)), Const(flat[i], dtype), e)
    return e


# -- the weight transform ---------------------------------------------------------------------------------------------
def _weight_infer(types, blocks, lanes, tile=4, adjoint=False):
    w = types[0]
    _matrices(tile)
    if not isinstance(lanes, int) or lanes < 1:
        raise ShapeError(f"winograd_weight needs lanes (output channels per block: the target's vector width, "
                         f"use_winograd sets it), got {lanes!r}")
    k = w.shape[1 if adjoint else 0] if w.ndim == 4 else 0
    if w.ndim != 4 or w.shape[2:] != (3, 3) or blocks * lanes < k:
        raise ShapeError(f"winograd_weight expects a [K, C, 3, 3] weight ([C, K, 3, 3] adjoint) and {blocks} x {lanes} "
                         f">= K, got {w.shape}")
    if len(types) > 1 and (adjoint or types[1].shape != (k,) or types[1].dtype != w.dtype):
        raise ShapeError(f"winograd_weight's scale must be {w.dtype}[{k}], one per output channel (and no adjoint), "
                         f"got {types[1].dtype}{list(types[1].shape)}")
    return [TensorType((alpha(tile), alpha(tile), blocks, w.shape[0 if adjoint else 1], lanes), w.dtype)]


def _weight(w, scale=None, blocks=1, lanes=None, tile=4, adjoint=False):
    ins = [w] if scale is None else [w, scale]
    shape = _weight_infer(ins, blocks, lanes, tile, adjoint)[0].shape
    k, c = (w.shape[1], w.shape[0]) if adjoint else w.shape[:2]
    return te.extern([(shape, w.dtype)], ins, weight_transform(k, c, blocks, lanes, w.dtype, tile, adjoint),
                     "winograd_weight")[0]


def _weight_ref(w, scale=None, blocks=1, lanes=None, tile=4, adjoint=False):
    """G (w[k] * scale[k]) G^T as two GEMMs over every (channel, output channel) at once (it is the compile-time
    fold of a frozen weight: ResNet-18's took 0.9 s as one einsum, 0.1-0.3 s this way)."""
    if adjoint:
        w = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
    g = _matrices(tile)[2]
    k, c = w.shape[:2]
    a = alpha(tile)
    wp = np.zeros((3, 3, c, blocks * lanes))                    # [i, j, C, K padded], float64
    wp[..., :k] = w.transpose(2, 3, 1, 0)
    t = (g @ wp.reshape(3, -1)).reshape(a, 3, -1)               # G w: [a, j, C * K]
    u = np.matmul(g, t).reshape(a, a, c, blocks * lanes)        # (G w) G^T: [a, b, C, K padded]
    if scale is not None:
        u[..., :k] *= scale
    u = u.reshape(a, a, c, blocks, lanes)
    return np.ascontiguousarray(u.transpose(0, 1, 3, 2, 4), dtype=w.dtype)


register(OpDef("winograd_weight", Kind.OPAQUE, _weight_infer, _weight_ref, _weight, {}, None,
               lambda rng: [([rand(rng, (5, 3, 3, 3))], {"blocks": 1, "lanes": 16}),
                            ([rand(rng, (40, 16, 3, 3))], {"blocks": 4, "lanes": 16}),
                            ([rand(rng, (20, 6, 3, 3))], {"blocks": 2, "lanes": 16, "tile": 2}),
                            ([rand(rng, (40, 16, 3, 3)), rand(rng, (40,))], {"blocks": 3, "lanes": 16}),
                            ([rand(rng, (20, 6, 3, 3)), rand(rng, (20,))], {"blocks": 2, "lanes": 16, "tile": 2}),
                            ([rand(rng, (6, 20, 3, 3))], {"blocks": 2, "lanes": 16, "adjoint": True}),
                            ([rand(rng, (5, 40, 3, 3))], {"blocks": 3, "lanes": 16, "tile": 2, "adjoint": True}),
                            ([rand(rng, (40, 16, 3, 3))], {"blocks": 5, "lanes": 8})],
               ("float32",), doc="Winograd F(m x m,3x3) weight transform G w G^T, output channels packed in lanes; "
                                 "times scale[k] per output channel k when given (a folded batch norm); adjoint: the "
                                 "weight is given as [C, K, 3, 3] flipped in space (a conv's input gradient)."))


# -- the convolution --------------------------------------------------------------------------------------------------
def _conv_infer(types, out_channels, padding=(1, 1), nv=1, tile=4):
    x, u = types
    ph, pw = padding
    a = alpha(tile)
    _matrices(tile)
    words = u.dtype == "int32"          # bf16x2 words over input channel pairs
    c = u.shape[3] * 2 if words and u.ndim == 5 else u.shape[3] if u.ndim == 5 else -1
    if x.ndim != 4 or x.dtype != "float32" or u.ndim != 5 or u.shape[:2] != (a, a) or c != x.shape[1] \
            or u.shape[2] * u.shape[4] < out_channels or x.shape[2] + 2 * ph < 3 or x.shape[3] + 2 * pw < 3:
        raise ShapeError(f"conv2d_winograd (tile {tile}) expects float32 NCHW input and a [{a}, {a}, K/16, C, 16] "
                         f"float32 weight (or [{a}, {a}, K/16, C/2, 16] bf16x2 words, C even), got {x.shape} "
                         f"{x.dtype} and {u.shape} {u.dtype}")
    return [TensorType((x.shape[0], out_channels, x.shape[2] + 2 * ph - 2, x.shape[3] + 2 * pw - 2), x.dtype)]


def _conv(x, u, out_channels, padding=(1, 1), nv=1, tile=4):
    """y = A^T [U . (B^T d B)] A per m x m output tile, written as one reduction over (c, xi1, xi2, a1, a2).
    For bf16 words this generic form reads U's halves but does not round V (the schedule, which always applies
    to the shapes the pass makes, does, as the reference)."""
    n_, c_, h_, w_ = x.shape
    (_, _, oh_, ow_) = _conv_infer([x, u], out_channels, padding, nv, tile)[0].shape
    ph, pw = padding
    lanes = u.shape[4]
    a = alpha(tile)
    at, bt, _ = MATRICES[tile]
    words = u.dtype == "int32"
    rc, r1, r2 = te.reduce_axis(c_, "rc"), te.reduce_axis(a, "e1"), te.reduce_axis(a, "e2")
    ra, rb = te.reduce_axis(a, "a1"), te.reduce_axis(a, "a2")

    def body(n, k, h, w):
        e1, e2, a1, a2 = r1[0], r2[0], ra[0], rb[0]
        y = binary("idiv", h, as_expr(tile)) * tile + a1 - ph
        xw = binary("idiv", w, as_expr(tile)) * tile + a2 - pw
        inside = binary("and", binary("and", compare("ge", y, as_expr(0)), compare("lt", y, as_expr(h_))),
                        binary("and", compare("ge", xw, as_expr(0)), compare("lt", xw, as_expr(w_))))
        xv = x[n, rc[0], minimum(maximum(y, as_expr(0)), as_expr(h_ - 1)),
               minimum(maximum(xw, as_expr(0)), as_expr(w_ - 1))]
        d = select(inside, xv, Const(0.0, x.dtype))
        kb, kl = binary("idiv", k, as_expr(lanes)), binary("imod", k, as_expr(lanes))
        if words:
            uw = u[e1, e2, kb, binary("idiv", rc[0], as_expr(2)), kl]
            uv = select(compare("eq", binary("imod", rc[0], as_expr(2)), as_expr(0)), Bf16Half(uw, 0), Bf16Half(uw, 1))
        else:
            uv = u[e1, e2, kb, rc[0], kl]
        coef = (_table(at, binary("imod", h, as_expr(tile)), e1, x.dtype)
                * _table(at, binary("imod", w, as_expr(tile)), e2, x.dtype)
                * _table(bt, e1, a1, x.dtype) * _table(bt, e2, a2, x.dtype))
        return te.sum_(coef * uv * d, [rc, r1, r2, ra, rb])
    flops = 2 * n_ * out_channels * oh_ * ow_ * c_ * 9
    return te.compute((n_, out_channels, oh_, ow_), body, "conv2d_winograd",
                      {"schedule": "conv2d_winograd", "x": x, "u": u, "padding": tuple(padding), "nv": nv,
                       "tile": tile, "flops": flops})


def _conv_ref(x, u, out_channels, padding=(1, 1), nv=1, tile=4):
    n_, c_, h_, w_ = x.shape
    ph, pw = padding
    oh_, ow_ = h_ + 2 * ph - 2, w_ + 2 * pw - 2
    m, a = tile, alpha(tile)
    at, bt, _ = _matrices(tile)
    th, tw = tiles(oh_, m), tiles(ow_, m)
    xp = np.zeros((n_, c_, th * m + 2, tw * m + 2))
    xp[:, :, ph:ph + h_, pw:pw + w_] = x
    d = np.stack([np.stack([xp[:, :, i * m:i * m + a, j * m:j * m + a] for j in range(tw)], 2)
                  for i in range(th)], 2)                                     # [n, c, th, tw, a, a]
    v = np.einsum("ai,nctuij,bj->nctuab", bt, d, bt)
    if u.dtype == np.int32:             # bf16: V rounded as the kernel rounds it, U's words read back
        v = unpair_ref(bf16_pairs_ref(v.astype(np.float32), 1), 1, c_).astype(np.float64)
        u = unpair_ref(u, 3, c_)
    uk = u.astype(np.float64).transpose(0, 1, 2, 4, 3).reshape(a, a, -1, c_)[:, :, :out_channels]
    mm = np.einsum("abkc,nctuab->nktuab", uk, v)
    y = np.einsum("ia,nktuab,jb->nktiuj", at, mm, at).reshape(n_, out_channels, th * m, tw * m)
    return y[:, :, :oh_, :ow_].astype(x.dtype)


def _sample(rng, n, c, k, h, w, padding, nv, tile=4, bf16=False, lanes=16):
    blocks = -(-(-(-k // lanes)) // nv) * nv
    u = _weight_ref(rand(rng, (k, c, 3, 3)), blocks=blocks, lanes=lanes, tile=tile)
    if bf16:
        u = bf16_pairs_ref(u, 3)
    x = rand(rng, (n, c, h, w))
    if bf16:        # small integers: V = B^T d B is exact in bf16, so the kernel rounds it as the reference does
        x = np.round(x * 2).astype(np.float32)
    return [x, u], {"out_channels": k, "padding": padding, "nv": nv, "tile": tile}


register(OpDef("conv2d_winograd", Kind.OUT_FUSABLE, _conv_infer, _conv_ref, _conv, {}, None,
               lambda rng: [_sample(rng, 1, 16, 16, 9, 10, (1, 1), 1),
                            _sample(rng, 2, 32, 40, 7, 13, (1, 1), 3),
                            _sample(rng, 1, 16, 20, 8, 8, (0, 0), 2),
                            _sample(rng, 1, 16, 20, 7, 9, (1, 1), 2, tile=2),
                            _sample(rng, 2, 32, 16, 14, 14, (1, 1), 1, tile=2, bf16=True),
                            _sample(rng, 1, 6, 40, 7, 7, (1, 1), 3, tile=2, bf16=True),
                            _sample(rng, 1, 16, 20, 8, 9, (1, 1), 2, lanes=8)],
               ("float32", "int32"), doc="3x3 stride-1 conv2d by Winograd F(m x m,3x3) over a winograd_weight operand "
                                         "(float32, or bf16x2 words over channel pairs)."))
