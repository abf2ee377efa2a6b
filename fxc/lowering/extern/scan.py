"""The loop IR of the ops along one dim that carry state from element to element (fxc/ops/scan.py): cumulative
sum / product / logsumexp, cummax / cummin with indices, and a stable merge sort (values + indices). Each walks
every row (the dim, for every position of the other dims) in order; rows run in parallel when the work pays.
"""
from __future__ import annotations

from ...symbolic.expr import Const, Var, as_expr, binary, cast, compare, is_float, minimum, select, unary
from ..loop_ir import Allocate, Buffer, For, IfThen, LetStmt, Store, seq


def row_loop(outer, n, inner, body, cost: int):
    """for every row of n elements (outer x inner positions, in parallel when worth it): body(at) where at(k) is
    the flat index of element k of the row."""
    p = Var("row")
    o = p if inner == 1 else binary("idiv", p, as_expr(inner))
    j = as_expr(0) if inner == 1 else binary("imod", p, as_expr(inner))
    at = lambda k: o * (n * inner) + k * inner + j
    rows = outer * inner
    kind = "parallel" if rows > 1 and rows * cost >= 1 << 15 else "serial"
    return For(p, rows, body(at), kind)


def nan_or(x, c):
    return binary("or", unary("isnan", x), c) if is_float(x.dtype) else c


def before(a, b, descending):
    """a goes strictly before b (NaN is the largest value)."""
    if descending:
        c = compare("gt", a, b)
        return (binary("or", c, binary("and", unary("isnan", a), unary("not", unary("isnan", b))))
                if is_float(a.dtype) else c)
    c = compare("lt", a, b)
    return (binary("or", c, binary("and", unary("isnan", b), unary("not", unary("isnan", a))))
            if is_float(a.dtype) else c)


def scan_loops(outer, n, inner, dtype: str, init, comb):
    """lower(outs, ins) of a cumulative op along rows of n elements (x viewed as [outer, n, inner]): acc = init,
    then acc = comb(acc, x[k]), stored at every k."""
    def lower(outs, ins):
        out, xb = outs[0], ins[0]
        acc = Buffer("acc", dtype, 1, "private")
        z, k = as_expr(0), Var("k")

        def row(at):
            step = seq(Store(acc, z, comb(acc[z], xb[at(k)])), Store(out, at(k), acc[z]))
            start = Const(init, dtype) if is_float(dtype) else as_expr(init, dtype)
            return Allocate(acc, seq(Store(acc, z, start), For(k, n, step)))
        return row_loop(outer, n, inner, row, n)
    return lower


def cumext_loops(outer, n, inner, dtype: str, kind: str):
    """lower(outs, ins) of cummax / cummin (kind) along rows of n elements: the running extreme (NaN wins) and the
    last index reaching it."""
    def lower(outs, ins):
        vals, idxs, xb = outs[0], outs[1], ins[0]
        acc, pos = Buffer("acc", dtype, 1, "private"), Buffer("pos", "int64", 1, "private")
        z, k = as_expr(0), Var("k")

        def row(at):
            v = xb[at(k)]
            better = compare("ge" if kind == "cummax" else "le", v, acc[z])
            take = binary("or", compare("eq", k, z), nan_or(v, better))
            step = IfThen(take, seq(Store(acc, z, v), Store(pos, z, k)))
            return Allocate(acc, Allocate(pos, For(k, n, seq(step, Store(vals, at(k), acc[z]),
                                                             Store(idxs, at(k), pos[z])))))
        return row_loop(outer, n, inner, row, n)
    return lower


def sort_loops(outer, n, inner, dtype: str, descending: bool):
    """lower(outs, ins) of a stable sort along rows of n elements (outs: values, indices): a bottom-up merge sort,
    the data ping-ponging between the output row and a private scratch row; NaN sorts as the largest value."""
    widths = []
    while (1 << len(widths)) < n:
        widths.append(1 << len(widths))

    def lower(outs, ins):
        vals, idxs, xb = outs[0], outs[1], ins[0]
        sv, si = Buffer("sv", dtype, n, "private"), Buffer("si", "int64", n, "private")
        pi, pj = Buffer("pi", "int64", 1, "private"), Buffer("pj", "int64", 1, "private")
        z = as_expr(0)

        def row(at):
            out_side = (vals, idxs, at)
            scratch = (sv, si, lambda k: k)
            # the data ping-pongs between the output row and the scratch row; start so it ends in the output
            sides = [out_side, scratch] if len(widths) % 2 == 0 else [scratch, out_side]
            k = Var("k")
            v0, i0, a0 = sides[0]
            stmts = [For(k, n, seq(Store(v0, a0(k), xb[at(k)]), Store(i0, a0(k), k)))]
            for p, w in enumerate(widths):
                (srcv, srci, sa), (dstv, dsti, da) = sides[p % 2], sides[(p + 1) % 2]
                blk, k = Var("blk"), Var("k")
                s = blk * (2 * w)
                mid, end = minimum(s + w, as_expr(n)), minimum(s + 2 * w, as_expr(n))
                i, j, right = Var("i"), Var("j"), Var("right", "bool")
                li, rj = minimum(i, as_expr(n - 1)), minimum(j, as_expr(n - 1))
                take_right = binary("and", compare("lt", j, end),
                                    binary("or", compare("ge", i, mid),
                                           before(srcv[sa(rj)], srcv[sa(li)], descending)))
                one = lambda c: cast("int64", c)
                merge = LetStmt(i, pi[z], LetStmt(j, pj[z], LetStmt(right, take_right, seq(
                    Store(dstv, da(s + k), select(right, srcv[sa(rj)], srcv[sa(li)])),
                    Store(dsti, da(s + k), select(right, srci[sa(rj)], srci[sa(li)])),
                    Store(pi, z, i + one(unary("not", right))),
                    Store(pj, z, j + one(right))))))
                stmts.append(For(blk, -(-n // (2 * w)), seq(
                    Store(pi, z, s), Store(pj, z, mid),
                    For(k, 2 * w, IfThen(compare("lt", s + k, end), merge)))))
            return Allocate(sv, Allocate(si, Allocate(pi, Allocate(pj, seq(*stmts)))))
        return row_loop(outer, n, inner, row, n * max(len(widths), 1))
    return lower
