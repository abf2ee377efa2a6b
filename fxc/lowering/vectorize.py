"""Explicit vector code over the target's Caps.lanes: the strides of indices, the vector forms of expressions and loops.

Takes scalar expressions (`fxc.symbolic.expr`) and loop-IR statements as the schedules and the lowering build them,
and produces their vector forms:
- linear_stride / aligned_stride: the stride of an index along a variable (affine in it; aligned_stride also through
  idiv / imod of a chunk that starts at a multiple of the lanes);
- vectorize_expr: an expression over v, v+1, ..., v+lanes-1 as one vector expression (loads along v become vector
  loads, values independent of v broadcasts), or None when it has no vector form;
- vectorize_loops: every `vectorize` loop of stores rewritten as explicit vector code (vector stores, vector
  accumulators folded after the loop, a scalar tail); loops that do not fit are left for LLVM's vectorizer.
Used by the CPU schedules (gemm, default, depthwise, winograd, grouped_conv), the GPU GEMV schedule, the lowering's
vector rows (lower.py) and the symbolic loops (sym_loops.py).
"""
from __future__ import annotations

import itertools
import math

from ..symbolic.expr import (
    Bin,
    Broadcast,
    Cast,
    Const,
    Expr,
    Fma,
    LaneReduce,
    Load,
    PackBf16,
    Select,
    Un,
    Var,
    VecLoad,
    as_expr,
    binary,
    lanes_of,
    rebuild,
    scalar_of,
    substitute,
    vec,
    walk,
)
from .loop_ir import Buffer, For, Seq, Store, map_body, seq

VECTOR_UNARY = ("neg", "abs", "sqrt", "floor", "ceil", "trunc", "round")
VECTOR_MATH_F32 = ("exp", "erf", "log", "log2", "log10", "log1p", "expm1", "tanh", "sin", "cos", "sigmoid")   # float32
# vector forms the renderers provide (llvm/mathlib.VECTOR_MATH)


def linear_stride(e: Expr, v: Var):
    """Coefficient of v in e if e is affine in v with a constant coefficient, else None."""
    if e is v:
        return 1
    if isinstance(e, (Const, Var)):
        return 0
    if not any(x is v for x in walk(e)):
        return 0
    if isinstance(e, Bin):
        op, a, b = e.args
        sa, sb = linear_stride(a, v), linear_stride(b, v)
        if sa is None or sb is None:
            return None
        if op == "add":
            return sa + sb
        if op == "sub":
            return sa - sb
        if op == "mul":
            if isinstance(b, Const) and sb == 0:
                return sa * b.value
            if isinstance(a, Const) and sa == 0:
                return sb * a.value
    return None


def linear_stride_is_one(index: Expr, v: Var) -> bool:
    """index advances by one element per step of v."""
    return linear_stride(index, v) == 1


def aligned_stride(e: Expr, v: Var, lanes: int):
    """The stride of index e along v, v+1, ..., v+lanes-1 when v is a multiple of `lanes` (a vector loop's chunk):
    as linear_stride, and also through idiv / imod by a multiple of `lanes` of an index that advances by 1 from a
    multiple of `lanes` (within the chunk its quotient stays and its remainder advances: a reshape's unravelled
    index, out[i, j] = in[(j // 64) * 8192 + i * 64 + j % 64]); None otherwise."""

    def residue(x):
        """x mod lanes when v is a multiple of lanes, or None when unknown."""
        if x is v:
            return 0
        if isinstance(x, Const):
            return x.value % lanes
        if isinstance(x, Bin) and x.args[0] in ("add", "sub", "mul"):
            ra, rb = residue(x.args[1]), residue(x.args[2])
            if x.args[0] == "mul" and (ra == 0 or rb == 0):
                return 0
            if ra is None or rb is None:
                return None
            return (ra + rb if x.args[0] == "add" else ra - rb if x.args[0] == "sub" else ra * rb) % lanes
        return None

    def go(x):
        if not any(y is v for y in walk(x)):
            return 0
        if isinstance(x, Bin):
            op, a, b = x.args
            if op in ("idiv", "imod") and isinstance(b, Const) and b.value % lanes == 0 and go(a) == 1 \
                    and residue(a) == 0:
                return 0 if op == "idiv" else 1
            sa, sb = go(a), go(b)
            if sa is None or sb is None:
                return None
            if op in ("add", "sub"):
                return sa + sb if op == "add" else sa - sb
            if op == "mul" and sa == 0 and sb == 0:    # a chunk's constant times another (a symbolic stride)
                return 0
            if op == "mul" and isinstance(b, Const) and sb == 0:
                return sa * b.value
            if op == "mul" and isinstance(a, Const) and sa == 0:
                return sb * a.value
            return None
        return linear_stride(x, v)

    return go(e)


_INT8_EPILOGUE = {"float32", "int32", "int8", "uint8"}     # vector casts among these (backends/llvm/arith.py)
_INT32_OPS = ("add", "sub", "mul", "and", "or", "shl", "shr")  # int32 lane-wise ops of int8 epilogues and word packs
_INT8_ROWS = ("uint8", "int8")                              # quantised tensors: `vectorize` loops storing them

def vectorize_expr(e: Expr, v: Var, lanes: int, replace: dict | None = None, aligned: bool = False):
    """e as a vector over v, v+1, ..., v+lanes-1 (loads along v become vector loads), or None.
    replace: scalar variables that stand for a lane of a given vector (e.g. the accumulator). aligned: v is a
    multiple of `lanes` (load strides then also through idiv / imod, aligned_stride)."""
    replace = replace or {}
    memo: dict = dict(replace)
    used = {x for x in walk(e) if any(c is v or c in replace for c in walk(x))}

    def go(x):
        r = memo.get(x)
        if r is not None:
            return r
        if isinstance(x, Const):
            r = Const(x.value, vec(x.dtype, lanes))
        elif x not in used:                     # independent of v: the same value in every lane
            r = Broadcast(x, lanes) if lanes_of(x.dtype) == 1 else None
        elif isinstance(x, Load):
            buf, idx = x.args
            s = linear_stride(idx, v)
            if s is None and aligned:
                s = aligned_stride(idx, v, lanes)
            if s is None or s < 0:
                return None
            r = VecLoad(buf, idx, lanes, s)
        elif isinstance(x, Cast) and x.args[1].dtype == "bool" and x.dtype in ("float32", "float64"):
            m = go(x.args[1])                    # a mask's 0 / 1 (dropout's backward)
            r = None if m is None else Cast(vec(x.dtype, lanes), m)
        elif isinstance(x, Cast) and {x.dtype, x.args[1].dtype} <= _INT8_EPILOGUE:
            a = go(x.args[1])                    # an int8 kernel's epilogue: int32 -> float32 -> int8 / uint8
            r = None if a is None else Cast(vec(x.dtype, lanes), a)
        elif isinstance(x, Bin) and (x.dtype == "int32" and x.args[0] in _INT32_OPS
                                     or x.dtype in _INT8_EPILOGUE and x.args[0] in ("max", "min")):
            a, b = go(x.args[1]), go(x.args[2])
            r = None if a is None or b is None else rebuild(x, (x.args[0], a, b))
        elif isinstance(x, Select) and x.dtype in _INT8_ROWS:      # a max pool's taps over int8 / uint8
            c, t, f = go(x.args[0]), go(x.args[1]), go(x.args[2])
            r = None if c is None or t is None or f is None else Select(c, t, f)
        elif isinstance(x, PackBf16):            # float32 pairs -> bf16x2 words (vcvtne2ps2bf16)
            lo, hi = go(x.args[0]), go(x.args[1])
            r = None if lo is None or hi is None else PackBf16(lo, hi)
        elif isinstance(x, (Bin, Un, Select, Fma)) and scalar_of(x.dtype) in ("float32", "float64", "bool"):
            if isinstance(x, Un) and x.args[0] not in VECTOR_UNARY and not (
                    x.args[0] in VECTOR_MATH_F32 and x.dtype == "float32"):
                return None
            if isinstance(x, Bin) and not (
                    x.args[0] in ("add", "sub", "mul", "div", "max", "min", "lt", "le", "gt", "ge", "eq", "ne")
                    and scalar_of(x.args[1].dtype) in ("float32", "float64")
                    or x.args[0] in ("and", "or", "xor") and x.dtype == "bool"):     # masks: ReLU6's backward
                return None
            args = []
            for a in x.args:
                if isinstance(a, Expr):
                    va = go(a)
                    if va is None:
                        return None
                    args.append(va)
                else:
                    args.append(a)
            r = rebuild(x, tuple(args)) if not isinstance(x, Fma) else Fma(*args)
        else:
            return None
        memo[x] = r
        return r

    return go(e)


# -- explicit vectorization of `vectorize` loops -------------------------------------------------------------------
def vectorize_loops(s, lanes: int):
    """Rewrite every `vectorize` loop whose body is a list of stores into explicit vector code of `lanes` lanes
    (the target's Caps.lanes): a store contiguous along the loop becomes a vector store; `acc[c] = acc[c]
    (+|max|min) f(i)` with an index independent of the loop becomes a vector accumulator folded after the loop; a
    tail shorter than `lanes` stays scalar. Loops that do not fit are left for LLVM's vectorizer."""
    if isinstance(s, For) and s.kind == "vectorize" and s.start == 0:
        v = _vectorize_loop(s, lanes)
        if v is not None:
            return v
    return map_body(s, lambda b: vectorize_loops(b, lanes))


_COMBINE_OPS = ("add", "max", "min")
_vred_ids = itertools.count()


def _vectorize_loop(loop: For, lanes: int):
    stores = loop.body.stmts if isinstance(loop.body, Seq) else [loop.body]
    v, n = loop.var, loop.extent
    if not all(isinstance(st, Store) for st in stores):
        return None
    static = isinstance(n, int)             # a symbolic extent (sym_loops.py): whole vectors and a scalar tail
    if static and n < lanes:
        return _narrow_vector(stores, v, n, lanes)
    full = n // lanes
    vo = Var("vo")
    base = vo * lanes
    vec_body, pre, post = [], [], []
    for st in stores:
        s_idx = linear_stride(st.index, v)
        if st.buf.dtype != "float32" and not (st.buf.dtype in _INT8_ROWS and s_idx == 1):
            return None
        val = st.value
        if s_idx == 1:
            vs = vectorize_expr(val, v, lanes, aligned=True)
            if vs is None:
                return None
            vec_body.append(Store(st.buf, substitute(st.index, {v: base}), substitute(vs, {v: base})))
        elif s_idx == 0 and isinstance(val, Bin) and val.args[0] in _COMBINE_OPS and \
                isinstance(val.args[1], Load) and val.args[1].args[0] is st.buf and val.args[1].args[1] is st.index:
            op, _, f = val.args
            vf = vectorize_expr(f, v, lanes, aligned=True)
            if vf is None or any(isinstance(x, Load) and x.args[0] is st.buf for x in walk(f)):
                return None
            vacc = Buffer(f"vred{next(_vred_ids)}", "float32", lanes, "private")
            zero = as_expr(0)
            ident = {"add": 0.0, "max": -math.inf, "min": math.inf}[op]
            pre.append(Store(vacc, zero, Const(ident, vec("float32", lanes))))
            vec_body.append(Store(vacc, zero, binary(op, VecLoad(vacc, zero, lanes), substitute(vf, {v: base}))))
            post.append(Store(st.buf, st.index, binary(op, Load(st.buf, st.index),
                                                       LaneReduce(op, VecLoad(vacc, zero, lanes)))))
        else:
            return None
    # reductions read their accumulator only through the combine, so folding after the loop is exact
    # up to reassociation; any other read of a reduced buffer in the loop would see partial sums
    red_bufs = {st.buf for st in stores if linear_stride(st.index, v) == 0}
    for st in stores:
        if linear_stride(st.index, v) == 1 and any(isinstance(x, Load) and x.args[0] in red_bufs
                                                   for x in walk(st.value)):
            return None
    tail = None
    if not static or n % lanes:
        tail = For(v, n, loop.body, "serial", full * lanes)
    return seq(*pre, For(vo, full, seq(*vec_body)), *post, tail)


def _narrow_vector(stores: list, v: Var, n: int, lanes: int):
    """A `vectorize` loop of 4 to lanes - 1 float32 stores contiguous along v as one vector of n lanes (LLVM's own
    vectorizer picks lanes-wide vectors and leaves such a loop scalar: a 3x3 stride-2 max pool writing rows of 13
    ran 6x slower per element than one writing rows of 27); None otherwise."""
    if n >= lanes:
        return None
    if n < 4 or any(st.buf.dtype != "float32" or linear_stride(st.index, v) != 1 for st in stores):
        return None
    zero, out, written = {v: as_expr(0)}, [], {st.buf for st in stores}
    for st in stores:
        vs = vectorize_expr(st.value, v, n)
        if vs is None or any(isinstance(x, Load) and x.args[0] in written for x in walk(st.value)):
            return None
        out.append(Store(st.buf, substitute(st.index, zero), substitute(vs, zero)))
    return seq(*out)
