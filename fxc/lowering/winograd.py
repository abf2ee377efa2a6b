"""Winograd F(m x m, 3x3)'s algorithm (m = 4 or 2) as lowering builds it: the matrices (A^T, B^T, G) per tile
size, the tile counts, the transforms left . d . right^T as vector expressions (`transform`) and as two short
loops of loop IR (`transform_loops`), and the weight transform U = G w G^T as the loop IR of the winograd_weight
op's extern (`weight_transform`). Used by the op definitions (fxc/ops/winograd.py), the conv's CPU schedule
(schedules/cpu/winograd.py) and the use_winograd pass (tile counts).
"""
from __future__ import annotations

from ..symbolic.expr import Bin, Const, Fma, Load, Var, VecLoad, as_expr, binary, vec
from .loop_ir import Allocate, Buffer, For, IfThen, Store, seq

MATRICES = {                # m -> (A^T, B^T, G)
    4: (((1, 1, 1, 1, 1, 0),
         (0, 1, -1, 2, -2, 0),
         (0, 1, 1, 4, 4, 0),
         (0, 1, -1, 8, -8, 1)),
        ((4, 0, -5, 0, 1, 0),
         (0, -4, -4, 1, 1, 0),
         (0, 4, -4, -1, 1, 0),
         (0, -2, -1, 2, 1, 0),
         (0, 2, -1, -2, 1, 0),
         (0, 4, 0, -5, 0, 1)),
        ((1 / 4, 0, 0),
         (-1 / 6, -1 / 6, -1 / 6),
         (-1 / 6, 1 / 6, -1 / 6),
         (1 / 24, 1 / 12, 1 / 6),
         (1 / 24, -1 / 12, 1 / 6),
         (0, 0, 1))),
    2: (((1, 1, 1, 0),
         (0, 1, -1, -1)),
        ((1, 0, -1, 0),
         (0, 1, 1, 0),
         (0, -1, 1, 0),
         (0, 1, 0, -1)),
        ((1, 0, 0),
         (1 / 2, 1 / 2, 1 / 2),
         (1 / 2, -1 / 2, 1 / 2),
         (0, 0, 1))),
}


def alpha(m: int) -> int:
    """The input tile's side: m + r - 1."""
    return m + 2


def tiles(n: int, m: int = 4) -> int:
    return -(-n // m)


def _combo(coefs, terms, dtype):
    """sum_k coefs[k] * terms[k] over the non-zero coefficients."""
    acc = None
    for c, t in zip(coefs, terms):
        if c == 0:
            continue
        if acc is None:
            acc = t if c == 1 else Bin("mul", Const(float(c), dtype), t)
        elif c == 1:
            acc = Bin("add", acc, t)
        elif c == -1:
            acc = Bin("sub", acc, t)
        else:
            acc = Fma(Const(float(c), dtype), t, acc)
    return acc if acc is not None else Const(0.0, dtype)


def transform(d, left, right, dtype):
    """left . d . right^T for a matrix d of vector expressions (d[a][b])."""
    t = [[_combo(row, [d[a][b] for a in range(len(d))], dtype) for b in range(len(d[0]))] for row in left]
    return [[_combo(row, t[e], dtype) for row in right] for e in range(len(left))]


def transform_loops(load, left, right, tmp, store, lanes):
    """Statements storing (left . d . right^T)[e1][e2] with store(e1, e2, value), d[a][b] = load(a, b), as two
    short loops instead of one unrolled block (about a quarter of the code for LLVM to compile):
        for b:  tmp[e1][b] = sum_a left[e1][a] d[a][b]          (every e1 at once)
        for e1: out[e1][e2] = sum_b right[e2][b] tmp[e1][b]     (every e2 at once)
    tmp: a local of len(left) * len(right[0]) vectors of `lanes`; load/store get a loop Var for b / e1."""
    nb = len(right[0])
    dtype = tmp.dtype if lanes == 1 else vec(tmp.dtype, lanes)
    at = lambda e1, b: (as_expr(e1) * nb + b) * lanes
    get = (lambda e1, b: VecLoad(tmp, at(e1, b), lanes)) if lanes > 1 else (lambda e1, b: Load(tmp, at(e1, b)))
    b, e1 = Var("tb"), Var("te")
    col = [load(a, b) for a in range(len(left[0]))]
    first = For(b, nb, seq(*[Store(tmp, at(e, b), _combo(row, col, dtype)) for e, row in enumerate(left)]))
    row = [get(e1, bb) for bb in range(nb)]
    second = For(e1, len(left), seq(*[store(e1, e2, _combo(r, row, dtype)) for e2, r in enumerate(right)]))
    return seq(first, second)


def weight_transform(k_: int, c_: int, blocks: int, L: int, dtype: str, m: int = 4, adjoint: bool = False):
    """Loop IR of U[e1, e2, kb, c, l] = (G w[kb*L + l, c] G^T)[e1, e2] (zero where the channel >= K), times
    scale[kb*L + l] when the op has that second input: a te.extern lower function. Whole blocks of L output
    channels are one vector (a gather of the weight). adjoint: w[k, c, i, j] is read as w_in[c, k, 2 - i, 2 - j]."""
    def lower(outs, ins):
        ub, wb = outs[0], ins[0]
        sb = ins[1] if len(ins) > 1 else None
        kb, c, l = Var("kb"), Var("c"), Var("l")

        AL, G = alpha(m), MATRICES[m][2]
        tmp = Buffer("wgt", dtype, AL * 3 * L, "private")

        def one(lanes, k0):
            src = (lambda i, j: ((c * k_ + k0) * 3 + 2 - i) * 3 + 2 - j) if adjoint else \
                (lambda i, j: ((k0 * c_ + c) * 3 + i) * 3 + j)
            if lanes > 1:
                g = lambda i, j: VecLoad(wb, src(i, j), lanes, 9 if adjoint else c_ * 9)
                scale = VecLoad(sb, k0, lanes) if sb is not None else None
            else:
                g = lambda i, j: Load(wb, src(i, j))
                scale = Load(sb, k0) if sb is not None else None
            at = lambda e1, e2: (((e1 * AL + e2) * blocks + kb) * c_ + c) * L + (k0 - kb * L)
            u = lambda e1, e2, val: Store(ub, at(e1, e2), val if scale is None else binary("mul", val, scale))
            return transform_loops(g, G, G, tmp, u, lanes)
        full = k_ // L
        # whole blocks in parallel (a weight update repacks: every training step)
        stmts = ([For(kb, full, Allocate(tmp, For(c, c_, one(L, kb * L))),
                      "parallel" if full > 1 else "serial")]
                 if full else [])
        if blocks > full:       # the partial block (scalar, zero past K) and the padding blocks
            k = kb * L + l
            body = IfThen(Bin("lt", k, as_expr(k_)), one(1, k),
                          seq(*[Store(ub, ((as_expr(e * blocks) + kb) * c_ + c) * L + l, Const(0.0, dtype))
                                for e in range(AL * AL)]))
            stmts.append(Allocate(tmp, For(kb, blocks, For(c, c_, For(l, L, body)), "serial", full)))
        return seq(*stmts)
    return lower
