"""Complex values as real tensors with a trailing dim of 2 (torch.view_as_real's layout: real, imag).

Accepts ATen calls that take a complex value (a `Complex`) or convert to a complex dtype; produces registry
ops on the real [..., 2] form. `complex_table()` maps ATen overloads to converters taking and returning
`Complex` values; fxc.capture.torch.backend routes every call with a complex argument (or a complex dtype) through it,
so an ATen op without a complex converter here falls back to eager: a pair is never read as a real tensor.
Real -> complex entry points that take only real inputs (view_as_complex, complex, polar) are ordinary
ATen converters. The FFT family is in fxc/ops/fft.py.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .common import norm_axis, result_type
from .registry import aten_table, register_aten

REAL_OF = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}
COMPLEX_OF = {v: k for k, v in REAL_OF.items()}
ARITH = ("float32", "float64")     # real dtypes complex arithmetic runs in (complex32 values are only converted)


class Complex:
    """A complex tensor of shape `shape`, held as the real Value `v` of shape shape + (2,)."""

    __slots__ = ("v",)

    def __init__(self, v):
        if not v.shape or v.shape[-1] != 2 or v.dtype not in COMPLEX_OF:
            raise UnsupportedOpError(f"a complex value needs a float [..., 2] tensor, got {v.type}")
        self.v = v

    @property
    def shape(self) -> tuple:
        return tuple(self.v.shape[:-1])

    @property
    def dtype(self) -> str:
        return COMPLEX_OF[self.v.dtype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def type(self) -> str:
        return f"{self.dtype}{list(self.shape)}"

    def __repr__(self):
        return f"Complex({self.type})"


_COMPLEX: dict = {}


def register_complex(targets, converter):
    for t in (targets if isinstance(targets, (list, tuple)) else [targets]):
        if t in _COMPLEX:
            raise ValueError(f"complex converter for {t} registered twice")
        _COMPLEX[t] = converter


def complex_table() -> dict:
    """ATen overload -> converter for calls with complex arguments (every family loaded first)."""
    aten_table()
    return _COMPLEX


def is_complex_call(args, kwargs) -> bool:
    """Does a call take a complex value or name a complex dtype?"""
    def walk(a):
        if isinstance(a, Complex) or (isinstance(a, str) and a in REAL_OF) or isinstance(a, complex):
            return True
        return isinstance(a, (list, tuple)) and any(walk(x) for x in a)
    return walk(list(args)) or walk(list(kwargs.values()))


# -- the [..., 2] form ------------------------------------------------------------------------------------
def parts(b, c: Complex):
    """(real, imag) Values of c's shape."""
    out = []
    for k in (0, 1):
        s = b.call("slice", [c.v], dim=c.ndim, start=k, end=k + 1, step=1)
        out.append(b.call("reshape", [s], shape=c.shape))
    return tuple(out)


def pack(b, re, im) -> Complex:
    shape = tuple(re.shape) + (1,)
    return Complex(b.call("cat", [b.call("reshape", [re], shape=shape), b.call("reshape", [im], shape=shape)],
                          dim=len(shape) - 1))


def real_dtype(*xs) -> str:
    """The real dtype of the complex result of an op on xs (PyTorch's promotion, complex32 aside)."""
    class _T:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype
    ops = []
    for x in xs:
        if isinstance(x, Complex):
            ops.append(_T(x.shape, x.v.dtype))
        elif isinstance(x, complex):
            ops.append(1.0)
        elif isinstance(x, (bool, int, float)) or hasattr(x, "dtype"):
            ops.append(x)
    dt = result_type(ops, to_float=True)
    if dt not in ARITH:
        raise UnsupportedOpError(f"complex arithmetic in {COMPLEX_OF.get(dt, dt)}")
    return dt


def lift(b, x, dt: str) -> Complex:
    """x (Complex, real tensor or python number) as a complex value over real dtype dt."""
    if isinstance(x, Complex):
        return x if x.v.dtype == dt else Complex(b.call("cast", [x.v], dtype=dt))
    if isinstance(x, (bool, int, float, complex)):
        z = complex(x)
        return Complex(b.const(np.array([z.real, z.imag], dtype=dt)))
    x = b.as_tensor(x, dt)
    col = b.call("reshape", [x], shape=tuple(x.shape) + (1,))
    return Complex(b.call("pad", [col], pad=(0, 1), value=0.0, mode="constant"))


def is_real(x) -> bool:
    return not isinstance(x, (Complex, complex))


def _scale(b, c: Complex, y):
    """c * y for a real tensor or real python number y."""
    if not isinstance(y, (bool, int, float)):
        y = b.call("reshape", [y], shape=tuple(y.shape) + (1,))
    return b.call("mul", [c.v, y])


def _mul(b, x, y):
    dt = real_dtype(x, y)
    if is_real(y):
        return Complex(_scale(b, lift(b, x, dt), b.as_tensor(y, dt) if not isinstance(y, (int, float)) else y))
    if is_real(x):
        return _mul(b, y, x)
    (a, bb), (c, d) = parts(b, lift(b, x, dt)), parts(b, lift(b, y, dt))
    re = b.call("sub", [b.call("mul", [a, c]), b.call("mul", [bb, d])])
    im = b.call("add", [b.call("mul", [a, d]), b.call("mul", [bb, c])])
    return pack(b, re, im)


def _add_sub(op):
    def conv(b, x, y, alpha=1):
        if isinstance(alpha, complex) or (alpha != 1 and isinstance(y, complex)):
            raise UnsupportedOpError(f"complex {op} with a complex alpha")
        dt = real_dtype(x, y)
        if alpha != 1:
            y = _mul(b, y, alpha) if not is_real(y) else b.call("mul", [b.as_tensor(y, dt), alpha])
        return Complex(b.call(op, [lift(b, x, dt).v, lift(b, y, dt).v]))
    return conv


def _div(b, x, y, rounding_mode=None):
    if rounding_mode is not None:
        raise UnsupportedOpError("complex division with a rounding mode")
    dt = real_dtype(x, y)
    if is_real(y) and not isinstance(y, (bool, int, float)):
        return Complex(b.call("div", [lift(b, x, dt).v,
                                      b.call("reshape", [b.as_tensor(y, dt)], shape=tuple(y.shape) + (1,))]))
    if is_real(y):
        return Complex(b.call("div", [lift(b, x, dt).v, float(y)]))
    # (a + bi) / (c + di) in float64 (then rounded once): as accurate as PyTorch's scaled division, or more
    (a, bb), (c, d) = (tuple(b.call("cast", [p], dtype="float64") for p in parts(b, lift(b, z, dt))) for z in (x, y))
    den = b.call("add", [b.call("mul", [c, c]), b.call("mul", [d, d])])
    re = b.call("div", [b.call("add", [b.call("mul", [a, c]), b.call("mul", [bb, d])]), den])
    im = b.call("div", [b.call("sub", [b.call("mul", [bb, c]), b.call("mul", [a, d])]), den])
    return pack(b, b.call("cast", [re], dtype=dt), b.call("cast", [im], dtype=dt))


def _conj(b, x):
    return Complex(b.call("mul", [x.v, b.const(np.array([1, -1], dtype=x.v.dtype))]))


def _to_copy(b, x, dtype=None, **_):
    if isinstance(x, Complex) and dtype is None:
        return Complex(b.call("copy", [x.v]))
    if dtype in REAL_OF:
        rt = REAL_OF[dtype]
        if isinstance(x, Complex):
            if x.v.dtype == "float16":   # complex32 -> complex64/128 (exact through float32)
                return Complex(b.call("cast", [x.v], dtype=rt))
            return Complex(b.call("cast", [x.v], dtype=rt) if rt != x.v.dtype else b.call("copy", [x.v]))
        if rt == "float16":     # real -> complex32: pad in float32, then round both parts to half
            return Complex(b.call("cast", [lift(b, x, "float32").v], dtype="float16"))
        return lift(b, x, rt)
    if isinstance(x, Complex) and dtype is not None:   # complex -> real: the real part (PyTorch warns)
        return b.call("cast", [parts(b, x)[0]], dtype=dtype)
    raise UnsupportedOpError(f"_to_copy of {getattr(x, 'type', x)} to {dtype}")


def _real_conv(target):
    """Apply the real converter of a movement op to the [..., 2] tensor, with dims made explicit."""
    def conv(b, *args, **kwargs):
        op, real = aten_table()[target]
        return real(b, *args, **kwargs) if real is not None else b.call(op.name, list(args), **kwargs)
    return conv


def _mv(target, fix):
    """Movement on a complex x: fix(x, *args, **kwargs) -> (args, kwargs) for the real [..., 2] tensor."""
    real = _real_conv(target)

    def conv(b, x, *args, **kwargs):
        if not isinstance(x, Complex):
            raise UnsupportedOpError(f"{target} with a complex argument that is not its input")
        a, k = fix(x, *args, **kwargs)
        out = real(b, x.v, *a, **k)
        return Complex(out)
    return conv


def _d(x, d, extra=0):
    return norm_axis(d, x.ndim + extra)


def _squeeze_fix(x, dims=None):
    if dims is None:
        dims = [d for d, s in enumerate(x.shape) if s == 1]
    dims = [_d(x, d) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    return (dims,), {}


def _pad_fix(x, pad, value=0):
    if value != 0:
        raise UnsupportedOpError("constant_pad_nd of a complex tensor with a nonzero value")
    return ((0, 0) + tuple(pad), 0.0), {}


def _cat(b, tensors, dim=0):
    dt = real_dtype(*tensors)
    cs = [lift(b, t, dt) for t in tensors]
    cs = [c for c in cs if not (c.ndim == 1 and c.shape[0] == 0)] or cs[:1]
    if len(cs) == 1:
        return cs[0]
    return Complex(b.call("cat", [c.v for c in cs], dim=_d(cs[0], dim)))


def _view_as_complex(b, x):
    if x.dtype not in ("float32", "float64"):
        raise UnsupportedOpError(f"view_as_complex of {x.dtype}")
    return Complex(b.call("copy", [x]))


def _complex(b, re, im):
    if re.dtype != im.dtype or re.dtype not in ARITH:
        raise UnsupportedOpError(f"complex({re.dtype}, {im.dtype})")
    shape = tuple(np.broadcast_shapes(tuple(re.shape), tuple(im.shape)))
    return pack(b, b.call("expand", [re], size=shape), b.call("expand", [im], size=shape))


def _polar(b, r, theta):
    if r.dtype != theta.dtype or r.dtype not in ARITH:
        raise UnsupportedOpError(f"polar({r.dtype}, {theta.dtype})")
    re = b.call("mul", [r, b.call("cos", [theta])])
    im = b.call("mul", [r, b.call("sin", [theta])])
    return _complex(b, re, im)


def _need(x, what):
    if not isinstance(x, Complex) or x.v.dtype not in ARITH:
        raise UnsupportedOpError(f"{what} of {getattr(x, 'type', x)}")
    return x


def _filled(b, size, fill_value, dtype=None):
    dtype = dtype or ("complex64" if isinstance(fill_value, complex) else None)
    if REAL_OF.get(dtype) not in ARITH:
        raise UnsupportedOpError(f"a tensor of {dtype} filled with {fill_value!r}")
    z = complex(fill_value)
    c = b.const(np.array([z.real, z.imag], dtype=REAL_OF[dtype]))
    return Complex(b.call("expand", [c], size=tuple(size) + (2,)))


def _full_like(fill):
    def conv(b, x, *args, dtype=None, **kwargs):
        value = args[0] if fill is None else fill
        if dtype in REAL_OF or (dtype is None and isinstance(x, Complex)):
            return _filled(b, x.shape, value, dtype or x.dtype)
        real = aten_table()["aten.full_like.default"][1]    # a real tensor shaped like a complex one
        return real(b, parts(b, _need(x, "full_like"))[0] if isinstance(x, Complex) else x, value, dtype=dtype)
    return conv


def _where(b, cond, x, y):
    dt = real_dtype(x, y)
    cx, cy = lift(b, x, dt), lift(b, y, dt)
    cond = b.as_tensor(cond, "bool")
    return Complex(b.call("where", [b.call("reshape", [cond], shape=tuple(cond.shape) + (1,)), cx.v, cy.v]))


def _copy(b, dst, src, non_blocking=False):
    """dst's shape and dtype, src's values (a complex src into a real dst: its real part, as PyTorch)."""
    if not isinstance(dst, Complex):
        re = parts(b, _need(src, "copy"))[0]
        return b.call("copy", [b.call("expand", [b.as_tensor(re, dst.dtype)], size=tuple(dst.shape))])
    c = lift(b, src, _need(dst, "copy").v.dtype)
    return Complex(b.call("copy", [b.call("expand", [c.v], size=dst.shape + (2,))]))


def _slice_scatter(b, x, src, dim=0, start=None, end=None, step=1):
    x = _need(x, "slice_scatter")
    conv = aten_table()["aten.slice_scatter.default"][1]
    return Complex(conv(b, x.v, lift(b, src, x.v.dtype).v, _d(x, dim), start, end, step))


def _sum(b, x, dim=None, keepdim=False, dtype=None):
    x = _need(x, "sum")
    if dtype is not None and dtype != x.dtype:
        x = _to_copy(b, x, dtype=dtype)
    if x.ndim == 0:
        return Complex(b.call("copy", [x.v]))
    dims = tuple(range(x.ndim)) if dim is None or dim == [] or dim == () else \
        tuple(sorted({_d(x, d) for d in (dim if isinstance(dim, (list, tuple)) else [dim])}))
    return Complex(b.call("sum", [x.v], axes=dims, keepdim=keepdim))


register_aten("aten.view_as_complex.default", _view_as_complex)
register_aten("aten.complex.default", _complex)
register_aten("aten.polar.default", _polar)

register_complex("aten._to_copy.default", _to_copy)
register_complex(["aten.clone.default", "aten.lift_fresh_copy.default"],
                 lambda b, x, **_: Complex(b.call("copy", [_need(x, "clone").v])))
register_complex("aten.alias.default", lambda b, x: x)
register_complex("aten.view_as_real.default", lambda b, x: _need(x, "view_as_real").v)
register_complex(["aten._conj.default", "aten._conj_physical.default", "aten.conj_physical.default"],
                 lambda b, x: _conj(b, _need(x, "conj")))
register_complex("aten.mul.Tensor", _mul)
register_complex("aten.mul.Scalar", _mul)
register_complex(["aten.add.Tensor", "aten.add.Scalar"], _add_sub("add"))
register_complex(["aten.sub.Tensor", "aten.sub.Scalar"], _add_sub("sub"))
register_complex(["aten.div.Tensor", "aten.div.Scalar"], _div)
register_complex("aten.neg.default", lambda b, x: Complex(b.call("neg", [_need(x, "neg").v])))
register_complex("aten.abs.default", lambda b, x: b.call("hypot", list(parts(b, _need(x, "abs")))))
register_complex("aten.angle.default", lambda b, x: b.call("atan2", list(reversed(parts(b, _need(x, "angle"))))))
register_complex("aten.real.default", lambda b, x: parts(b, _need(x, "real"))[0])
register_complex("aten.imag.default", lambda b, x: parts(b, _need(x, "imag"))[1])
register_complex("aten.cat.default", _cat)
register_complex("aten.full.default", lambda b, size, fill_value, dtype=None, **_: _filled(b, size, fill_value, dtype))
register_complex("aten.scalar_tensor.default", lambda b, s, dtype=None, **_: _filled(b, (), s, dtype))
register_complex("aten.where.self", _where)
register_complex("aten.full_like.default", _full_like(None))
register_complex("aten.zeros_like.default", _full_like(0))
register_complex("aten.ones_like.default", _full_like(1))
register_complex("aten.copy.default", _copy)
register_complex("aten.slice_scatter.default", _slice_scatter)
register_complex(["aten.sum.dim_IntList", "aten.sum.default"], _sum)
for _t in ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"):
    register_complex(_t, _mv(_t, lambda x, shape: ((tuple(shape) + (2,),), {})))
for _t in ("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default"):
    register_complex(_t, _mv(_t, _squeeze_fix))
register_complex("aten.unsqueeze.default", _mv("aten.unsqueeze.default", lambda x, dim: ((_d(x, dim, 1),), {})))
register_complex("aten.permute.default", _mv("aten.permute.default",
                                            lambda x, dims: ((tuple(_d(x, d) for d in dims) + (x.ndim,),), {})))
register_complex("aten.transpose.int", _mv("aten.transpose.int", lambda x, d0, d1: ((_d(x, d0), _d(x, d1)), {})))
register_complex("aten.t.default", _mv("aten.transpose.int", lambda x: ((0, 1) if x.ndim == 2 else (0, 0), {})))
register_complex("aten.expand.default", _mv("aten.expand.default",
                                           lambda x, size, implicit=False: ((tuple(size) + (2,),), {})))
register_complex("aten.slice.Tensor", _mv("aten.slice.Tensor", lambda x, dim=0, start=None, end=None, step=1:
                                          ((_d(x, dim), start, end, step), {})))
register_complex("aten.select.int", _mv("aten.select.int", lambda x, dim, index: ((_d(x, dim), index), {})))
register_complex("aten.constant_pad_nd.default", _mv("aten.constant_pad_nd.default", _pad_fix))
register_complex("aten.flip.default", _mv("aten.flip.default", lambda x, dims: ((tuple(_d(x, d) for d in dims),), {})))
