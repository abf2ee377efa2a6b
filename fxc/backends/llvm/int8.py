"""LLVM IR of the 4-way byte dot (symbolic.expr.DotI8: acc + sum over k < 4 of a.byte[k] * b.byte[k] per int32
lane, b's bytes signed, a's unsigned or signed) in the instruction the target's Caps.int8_dot names:

    vnni512   vpdpbusd on 512, 256 or 128 bits (llvm.x86.avx512.vpdpbusd.*; AVX-512 VNNI with VL)
    vnni256   vpdpbusd on 256 or 128 bits (AVX-VNNI's VEX form: the same intrinsics)
    pmaddwd   exact without VNNI (AVX2, AVX-512BW): each word's even and odd bytes widened to int16 lanes (zero-
              extended for a, sign-extended for b), two vpmaddwd (int16 pairs -> int32, |255 x -128| x 2 < 2^31, so
              nothing saturates; vpmaddubsw's int16 pair sums would, at 255 x -128 x 2) and two adds; 512 bits where
              the vectors are (Caps.vector_bits)
    neon_dot  aarch64 sdot (signed a only: ops/int8.py shifts u8 activations by -128 on such targets)
    other     the widening form: bytes extended to int16, multiplied (exact: |255 x -128| < 2^15), extended to int32
              and the four products of a word added (NEON: smull / saddl; any vector ISA LLVM targets)

A scalar DotI8 is rendered as dot_i8_generic's int32 arithmetic. `FunctionWriter` (render.py) calls `render_dot_i8`.
"""
from __future__ import annotations

from ...symbolic.expr import DotI8, dot_i8_generic, lanes_of
from .arith import lty

_VNNI_LANES = {"vnni512": (4, 8, 16), "vnni256": (4, 8)}
_PMADDWD = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd", 16: "llvm.x86.avx512.pmaddw.d.512"}


def render_dot_i8(w, e: DotI8) -> str:
    """The SSA value of e in writer w (its module's caps choose the instruction)."""
    acc, a, b, signed = e.args
    n = lanes_of(e.dtype)
    if n == 1:
        return w.expr(dot_i8_generic(acc, a, b, signed))
    caps = w.m.caps
    kind = caps.int8_dot
    if not signed and n in _VNNI_LANES.get(kind, ()):
        bt = f"<{4 * n} x i8>"
        av, bv = _bitcast(w, e.dtype, w.expr(a), bt), _bitcast(w, e.dtype, w.expr(b), bt)
        return w.call(f"llvm.x86.avx512.vpdpbusd.{32 * n}", lty(e.dtype), [(lty(e.dtype), w.expr(acc)), (bt, av),
                                                                           (bt, bv)])
    if signed and kind == "neon_dot" and n == 4:
        bt = "<16 x i8>"
        av, bv = _bitcast(w, e.dtype, w.expr(a), bt), _bitcast(w, e.dtype, w.expr(b), bt)
        return w.call("llvm.aarch64.neon.sdot.v4i32.v16i8", "<4 x i32>", [("<4 x i32>", w.expr(acc)), (bt, av),
                                                                           (bt, bv)])
    if kind in ("pmaddwd", "vnni512", "vnni256") and 32 * n <= caps.vector_bits:
        return _pmaddwd(w, e, n, signed)
    return _widening(w, e, n, signed)


def _bitcast(w, dtype: str, x: str, to: str) -> str:
    r = w.new()
    w.emit(f"{r} = bitcast {lty(dtype)} {x} to {to}")
    return r


def _splat(n: int, v: int) -> str:
    return "<" + ", ".join([f"i16 {v}"] * n) + ">"


def _pmaddwd(w, e: DotI8, n: int, signed: bool) -> str:
    acc, a, b, _ = e.args
    ht = f"<{2 * n} x i16>"
    eight = _splat(2 * n, 8)

    def halves(x: str, sign: bool):
        """(even bytes, odd bytes) of the words as int16 lanes: zero- or sign-extended."""
        h = _bitcast(w, e.dtype, x, ht)
        lo, hi = w.new(), w.new()
        if sign:
            s = w.new()
            w.emit(f"{s} = shl {ht} {h}, {eight}")
            w.emit(f"{lo} = ashr {ht} {s}, {eight}")
            w.emit(f"{hi} = ashr {ht} {h}, {eight}")
        else:
            w.emit(f"{lo} = and {ht} {h}, {_splat(2 * n, 255)}")
            w.emit(f"{hi} = lshr {ht} {h}, {eight}")
        return lo, hi

    (alo, ahi), (blo, bhi) = halves(w.expr(a), signed), halves(w.expr(b), True)
    vt = lty(e.dtype)
    p = w.call(_PMADDWD[n], vt, [(ht, alo), (ht, blo)])
    q = w.call(_PMADDWD[n], vt, [(ht, ahi), (ht, bhi)])
    s, r = w.new(), w.new()
    w.emit(f"{s} = add {vt} {w.expr(acc)}, {p}")
    w.emit(f"{r} = add {vt} {s}, {q}")
    return r


def _widening(w, e: DotI8, n: int, signed: bool) -> str:
    acc, a, b, _ = e.args
    bt, ht, it = f"<{4 * n} x i8>", f"<{4 * n} x i16>", f"<{4 * n} x i32>"
    av, bv = _bitcast(w, e.dtype, w.expr(a), bt), _bitcast(w, e.dtype, w.expr(b), bt)
    ax, bx, p, px = w.new(), w.new(), w.new(), w.new()
    w.emit(f"{ax} = {'sext' if signed else 'zext'} {bt} {av} to {ht}")
    w.emit(f"{bx} = sext {bt} {bv} to {ht}")
    w.emit(f"{p} = mul nsw {ht} {ax}, {bx}")
    w.emit(f"{px} = sext {ht} {p} to {it}")
    vt = lty(e.dtype)
    r = w.expr(acc)
    for k in range(4):
        s, t = w.new(), w.new()
        picks = ", ".join(f"i32 {4 * i + k}" for i in range(n))
        w.emit(f"{s} = shufflevector {it} {px}, {it} poison, <{n} x i32> <{picks}>")
        w.emit(f"{t} = add {vt} {r}, {s}")
        r = t
    return r
