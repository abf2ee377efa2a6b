"""Random numbers: dropout's keep mask from a counter-based generator.

fxc cannot draw from PyTorch's generator inside a kernel, so a graph with random ops takes one more input, an
int64 seed that the caller draws from PyTorch's generator on every call (capture/torch.py: `torch.manual_seed`
makes a run repeatable, as in eager, though not with eager's very numbers). Element i of the stream-th random op
of a graph is SplitMix64's finalizer of (mix(seed, stream) + (i + 1) * golden): independent of the thread that
computes it, so any schedule gives the same mask, and different for every element, op and call.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering import te
from ..lowering.expr import Const, binary, compare
from ..relay_like.graph import TensorType
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


def _mask(seed, shape, p, stream=0):
    base = _finalize(binary("xor", seed[0], _i64((stream + 1) * MIX2)))
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]

    def body(*i):
        flat = Const(0, "int64")
        for ax, st in zip(i, strides):
            flat = binary("add", flat, binary("mul", ax, Const(st, "int64")))
        z = _finalize(binary("add", base, binary("mul", binary("add", flat, Const(1, "int64")), _i64(GOLDEN))))
        return compare("lt", _shr(z, 64 - BITS), Const(_threshold(p), "int64"))
    return te.compute(tuple(shape), body, "dropout_mask")


def _mask_ref(seed, shape, p, stream=0):
    u = np.uint64
    with np.errstate(over="ignore"):
        def fin(z):
            z = (z ^ (z >> u(30))) * u(MIX1)
            z = (z ^ (z >> u(27))) * u(MIX2)
            return z ^ (z >> u(31))
        base = fin(np.array(seed, dtype=np.int64).view(np.uint64)[0] ^ u(((stream + 1) * MIX2) & ((1 << 64) - 1)))
        i = np.arange(1, math.prod(shape) + 1, dtype=np.uint64)
        z = fin(base + i * u(GOLDEN))
    return ((z >> u(64 - BITS)).astype(np.int64) < _threshold(p)).reshape(shape)


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
