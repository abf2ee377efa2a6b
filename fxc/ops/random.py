"""Random numbers from a counter-based generator: dropout's keep mask, uniform and normal draws (rand, randn,
rand_like, randn_like, and bernoulli through core ATen's decomposition into rand).

fxc cannot draw from PyTorch's generator inside a kernel, so a graph with random ops takes one more input, an
int64 seed that the caller draws from PyTorch's generator on every call (capture/torch.py: `torch.manual_seed`
makes a run repeatable, as in eager, though not with eager's very numbers). Element i of the stream-th random op
of a graph is SplitMix64's finalizer of (mix(seed, stream) + (i + 1) * golden): independent of the thread that
computes it, so any schedule gives the same numbers, and different for every element, op and call. A uniform
float32 is the top 24 bits of that word times 2^-24 (float64: 53 bits); a normal one is Box-Muller's
sqrt(-2 ln u1) cos(2 pi u2) over two 24-bit halves of the word (u1 in (0, 1]: at most 5.8 standard deviations).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..symbolic.expr import Const, binary, cast, compare, unary
from ..types import TensorType
from .registry import Kind, OpDef, register, register_aten

GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB   # SplitMix64's constants
BITS = 24           # the uniform draw's resolution: keep when draw < round((1 - p) * 2^24)


def _i64(v: int) -> Const:
    v &= (1 << 64) - 1
    return Const(v - (1 << 64) if v >= 1 << 63 else v, "int64")


def _shr(z, k: int):
    """Logical shift right of an int64 (the IR's shift of a signed value is arithmetic)."""
    return binary("and", binary("shr", z, Const(k, "int64")), _i64((1 << (64 - k)) - 1))


def _finalize(z):
    z = binary("mul", binary("xor", z, _shr(z, 30)), _i64(MIX1))
    z = binary("mul", binary("xor", z, _shr(z, 27)), _i64(MIX2))
    return binary("xor", z, _shr(z, 31))


def _threshold(p: float) -> int:
    return round((1.0 - p) * (1 << BITS))


def _mask_infer(types, shape, p, stream=0):
    s = types[0]
    if s.dtype != "int64" or s.shape != (1,) or not 0.0 < p < 1.0:
        raise UnsupportedOpError(f"dropout_mask takes an int64[1] seed and 0 < p < 1, got {s} and p={p}")
    return [TensorType(tuple(shape), "bool")]


def _words(seed, shape, stream, name, fn):
    """te.compute of fn(z) over `shape`, z the generator's 64-bit word of each element (row-major index)."""
    base = _finalize(binary("xor", seed[0], _i64((stream + 1) * MIX2)))
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]

    def body(*i):
        flat = Const(0, "int64")
        for ax, st in zip(i, strides):
            flat = binary("add", flat, binary("mul", ax, Const(st, "int64")))
        return fn(_finalize(binary("add", base, binary("mul", binary("add", flat, Const(1, "int64")), _i64(GOLDEN)))))
    return te.compute(tuple(shape), body, name)


def _words_ref(seed, shape, stream):
    """The generator's words (uint64) for `shape`, as _words computes them."""
    u = np.uint64
    with np.errstate(over="ignore"):
        def fin(z):
            z = (z ^ (z >> u(30))) * u(MIX1)
            z = (z ^ (z >> u(27))) * u(MIX2)
            return z ^ (z >> u(31))
        base = fin(np.array(seed, dtype=np.int64).view(np.uint64)[0] ^ u(((stream + 1) * MIX2) & ((1 << 64) - 1)))
        i = np.arange(1, math.prod(shape) + 1, dtype=np.uint64)
        return fin(base + i * u(GOLDEN)).reshape(shape)


def _mask(seed, shape, p, stream=0):
    return _words(seed, shape, stream, "dropout_mask",
                  lambda z: compare("lt", _shr(z, 64 - BITS), Const(_threshold(p), "int64")))


def _mask_ref(seed, shape, p, stream=0):
    return (_words_ref(seed, shape, stream) >> np.uint64(64 - BITS)).astype(np.int64) < _threshold(p)


register(OpDef("dropout_mask", Kind.INJECTIVE, _mask_infer, _mask_ref, _mask, {}, None,
               lambda rng: [([np.array([12345], dtype=np.int64)], {"shape": (3, 40), "p": 0.3}),
                            ([np.array([-7], dtype=np.int64)], {"shape": (5, 7), "p": 0.5, "stream": 2})],
               ("int64",), doc="Dropout's keep mask (bool) from a counter-based generator: element i kept with "
                               "probability 1 - p, a function of (seed, stream, i) only."))


def _native_dropout(b, x, p, train=None):
    """aten.native_dropout in training: (x * mask / (1 - p), mask), as eager computes it, with fxc's own mask."""
    if train is False or not 0.0 < p < 1.0:
        raise UnsupportedOpError(f"dropout with p={p}, train={train}")
    if not b.random:
        raise UnsupportedOpError("dropout in training mode draws random numbers, which only torch.compile's graphs "
                                 "take a seed for (call model.eval() for fxc.from_torch)")
    mask = b.call("dropout_mask", [b.rng_seed()], shape=tuple(x.shape), p=float(p), stream=b.next_stream())
    kept = b.call("mul", [x, b.call("cast", [mask], dtype=x.dtype)])
    return b.call("mul", [kept, 1.0 / (1.0 - p)]), mask


register_aten("aten.native_dropout.default", _native_dropout)


# -- uniform and normal draws ----------------------------------------------------------------------------------
def _draw_infer(types, shape, dtype, stream=0):
    s = types[0]
    if s.dtype != "int64" or s.shape != (1,) or dtype not in ("float32", "float64"):
        raise UnsupportedOpError(f"random draws take an int64[1] seed and make float32 or float64, got {s}, {dtype}")
    return [TensorType(tuple(shape), dtype)]


def _uniform_of(z, dtype):
    bits = 24 if dtype == "float32" else 53
    return binary("mul", cast(dtype, _shr(z, 64 - bits)), Const(2.0 ** -bits, dtype))


def _uniform(seed, shape, dtype, stream=0):
    return _words(seed, shape, stream, "random_uniform", lambda z: _uniform_of(z, dtype))


def _uniform_ref(seed, shape, dtype, stream=0):
    bits = 24 if dtype == "float32" else 53
    z = _words_ref(seed, shape, stream)
    return ((z >> np.uint64(64 - bits)).astype(np.float64) * 2.0 ** -bits).astype(dtype)


def _halves(z, dtype):
    """Box-Muller's two uniforms from one word: u1 in (0, 1] from its top 24 bits, u2 in [0, 1) from the next 24."""
    scale = Const(2.0 ** -24, dtype)
    u1 = binary("mul", cast(dtype, binary("add", _shr(z, 40), Const(1, "int64"))), scale)
    u2 = binary("mul", cast(dtype, binary("and", _shr(z, 16), Const((1 << 24) - 1, "int64"))), scale)
    return u1, u2


def _normal(seed, shape, dtype, stream=0):
    def fn(z):
        u1, u2 = _halves(z, dtype)
        r = unary("sqrt", binary("mul", Const(-2.0, dtype), unary("log", u1)))
        return binary("mul", r, unary("cos", binary("mul", Const(2.0 * math.pi, dtype), u2)))
    return _words(seed, shape, stream, "random_normal", fn)


def _normal_ref(seed, shape, dtype, stream=0):
    z = _words_ref(seed, shape, stream)
    u1 = ((z >> np.uint64(40)).astype(np.float64) + 1) * 2.0 ** -24
    u2 = ((z >> np.uint64(16)) & np.uint64((1 << 24) - 1)).astype(np.float64) * 2.0 ** -24
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)).astype(dtype)


_draw_samples = lambda rng: [([np.array([12345], dtype=np.int64)], {"shape": (3, 40), "dtype": "float32"}),
                             ([np.array([-7], dtype=np.int64)], {"shape": (5, 7), "dtype": "float64", "stream": 2})]
register(OpDef("random_uniform", Kind.INJECTIVE, _draw_infer, _uniform_ref, _uniform, {}, None, _draw_samples,
               ("int64",), doc="Uniform draws in [0, 1) from the counter-based generator (24 bits a float32, 53 a "
                               "float64), a function of (seed, stream, element) only."))
register(OpDef("random_normal", Kind.INJECTIVE, _draw_infer, _normal_ref, _normal, {}, None, _draw_samples,
               ("int64",), doc="Standard normal draws (Box-Muller over the counter-based generator's words)."))


def _draw(op: str, what: str):
    """The converter of aten.rand / randn (like=False) or rand_like / randn_like (like=True)."""
    def convert(b, size_or_x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        like = not isinstance(size_or_x, (list, tuple))
        shape = tuple(size_or_x.shape) if like else tuple(size_or_x)
        dtype = dtype or (size_or_x.dtype if like else "float32")
        if device not in (None, "cpu") or layout not in (None, "torch.strided"):
            raise UnsupportedOpError(f"{what} on {device} / {layout}")
        if dtype not in ("float32", "float64", "float16", "bfloat16"):
            raise UnsupportedOpError(f"{what} of {dtype}")
        if not b.random:
            raise UnsupportedOpError(f"{what} draws random numbers, which only torch.compile's graphs take a seed for")
        out = b.call(op, [b.rng_seed()], shape=shape, dtype="float64" if dtype == "float64" else "float32",
                     stream=b.next_stream())
        return out if dtype in ("float32", "float64") else b.call("cast", [out], dtype=dtype)
    return convert


for _name, _op in (("rand", "random_uniform"), ("randn", "random_normal")):
    register_aten(f"aten.{_name}.default", _draw(_op, _name))
    register_aten(f"aten.{_name}_like.default", _draw(_op, f"{_name}_like"))
