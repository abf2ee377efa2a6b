"""Helpers shared by the op family files: type rules, broadcasting, dtype promotion, sample inputs."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..symbolic.expr import INTS, Const, as_expr, cast

# -- dtype promotion (PyTorch's rules: tensors with dims dominate, 0-d and scalars only lift the category)
_ORDER = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def category(dtype: str) -> int:
    return 0 if dtype == "bool" else (1 if dtype in INTS else 2)


def promote_types(a: str, b: str) -> str:
    if a == b:
        return a
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return max(a, b, key=_ORDER.index)


def result_type(operands, to_float: bool = False) -> str:
    """PyTorch's result dtype. operands: things with .shape/.dtype, and python scalars."""
    levels = {0: None, 1: None, 2: None}   # 0: tensors with dims, 1: 0-d tensors, 2: python scalars
    for x in operands:
        if isinstance(x, bool):
            lv, dt = 2, "bool"
        elif isinstance(x, int):
            lv, dt = 2, "int64"
        elif isinstance(x, float):
            lv, dt = 2, "float32"
        else:
            lv, dt = (0 if len(x.shape) else 1), x.dtype
        levels[lv] = dt if levels[lv] is None else promote_types(levels[lv], dt)
    out = None
    for lv in (0, 1, 2):
        dt = levels[lv]
        if dt is not None and (out is None or category(dt) > category(out)):
            out = dt
    out = out or "float32"
    if to_float and category(out) < 2:
        out = "float32"
    return out


# -- shapes --------------------------------------------------------------------------------------
def broadcast_shapes(*shapes) -> tuple:
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(nd):
        sizes = {s[d - nd + len(s)] for s in shapes if d - nd + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ShapeError(f"shapes {list(shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def bcast(t, axes):
    """Reference tensor `t` at output axes `axes`, broadcasting size-1 and missing leading dims."""
    off = len(axes) - t.ndim
    return t[tuple(as_expr(0) if t.shape[d] == 1 else axes[off + d] for d in range(t.ndim))]


def norm_axis(axis: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= axis < n:
        raise ShapeError(f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % n


def norm_axes(axes, ndim: int) -> tuple:
    if axes is None or axes == () or axes == [] or ndim == 0:   # a 0-d tensor: dim 0 / -1 is the tensor itself
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({norm_axis(a, ndim) for a in axes}))


def contiguous_strides(shape) -> tuple:
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


def same_type(types, **_):
    return [types[0]]


def np_dtype(dtype: str):
    if dtype == "bfloat16":      # numpy has no bfloat16: references carry its raw 16-bit patterns as uint16
        return np.dtype(np.uint16)
    return np.bool_ if dtype == "bool" else np.dtype(dtype)


def cast_array(x, dtype: str):
    """numpy cast with PyTorch's rounding: float16/bfloat16 go through float32 (uint16 arrays are bfloat16 bits)."""
    if x.dtype == np.uint16:
        x = (x.astype(np.uint32) << 16).view(np.float32)
    if dtype == "float16":
        return x.astype(np.float32).astype(np.float16)
    if dtype == "bfloat16":
        f = np.ascontiguousarray(x.astype(np.float32))
        b = f.view(np.uint32).astype(np.uint64)
        r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(f), np.uint16(0x7FC0), r)
    return x.astype(np_dtype(dtype))


def const_like(value, dtype: str) -> Const:
    return cast(dtype, as_expr(value, "float64" if isinstance(value, float) else "int64"))


# -- sample inputs for the generated tests -------------------------------------------------------
def rand(rng, shape, dtype="float32", low=-2.0, high=2.0):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        lo, hi = (0, 10) if dtype == "uint8" else (-10, 10)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def positive(rng, shape, dtype="float32"):
    return rng.uniform(0.1, 3.0, size=shape).astype(dtype)
