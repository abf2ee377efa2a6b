"""Float literals in LLVM IR and straight-line float32 vector math for what libm has only as scalars (exp, erf):
the bodies FunctionWriter (llvm_render.py) emits for a vector `exp` or `erf`."""
from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .llvm_render import FunctionWriter


def float_literal(value: float, dtype: str) -> str:
    if dtype == "float32":
        value = struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


class VectorMath:
    """Straight-line float32 vector code for functions libm only has as scalars (no vector math library
    is linked): exp by range reduction to 2^k * poly(r), erf by a Taylor series near 0 and the
    Abramowitz-Stegun 7.1.26 form elsewhere (absolute error < 2e-7)."""

    def __init__(self, w: FunctionWriter, t: str):
        self.w, self.t = w, t
        self.n = int(t[1:].split(" x ")[0])

    def c(self, v: float) -> str:
        return "<" + ", ".join([f"float {float_literal(v, 'float32')}"] * self.n) + ">"

    def op(self, code: str, a: str, b: str) -> str:
        r = self.w.new()
        self.w.emit(f"{r} = {code} {self.t} {a}, {b}")
        return r

    def fma(self, a, b, c) -> str:
        return self.w.call(f"llvm.fma.v{self.n}f32", self.t, [(self.t, a), (self.t, b), (self.t, c)])

    def fn(self, name, *args) -> str:
        return self.w.call(f"llvm.{name}.v{self.n}f32", self.t, [(self.t, a) for a in args])

    def poly(self, x, coefs) -> str:
        p = self.c(coefs[0])
        for k in coefs[1:]:
            p = self.fma(p, x, self.c(k))
        return p

    def select(self, cond_code, a, b, yes, no) -> str:
        m, r = self.w.new(), self.w.new()
        self.w.emit(f"{m} = fcmp {cond_code} {self.t} {a}, {b}")
        self.w.emit(f"{r} = select <{self.n} x i1> {m}, {self.t} {yes}, {self.t} {no}")
        return r

    def exp(self, x) -> str:
        """One polynomial for the whole range: 2^k is applied as 2^(k>>1) * 2^(k-(k>>1)), two normal floats, so
        k in [-150, 128] neither overflows the exponent field nor needs a second path for denormal results."""
        xc = self.fn("minnum", self.fn("maxnum", x, self.c(-104.0)), self.c(88.72283))
        k = self.fn("roundeven", self.op("fmul", xc, self.c(1.4426950408889634)))   # k in [-150, 128]
        r = self.fma(k, self.c(-0.693359375), xc)
        r = self.fma(k, self.c(2.12194440e-4), r)
        p = self.poly(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                          1.6666665459e-1, 5.0000001201e-1])
        y = self.fma(self.op("fmul", p, r), r, self.op("fadd", r, self.c(1.0)))
        it = f"<{self.n} x i32>"
        splat = lambda v: f"<{', '.join([f'i32 {v}'] * self.n)}>"
        ki, k1, k2 = self.w.new(), self.w.new(), self.w.new()
        self.w.emit(f"{ki} = fptosi {self.t} {k} to {it}")
        self.w.emit(f"{k1} = ashr {it} {ki}, {splat(1)}")
        self.w.emit(f"{k2} = sub {it} {ki}, {k1}")
        for half in (k1, k2):
            b, e, sc = self.w.new(), self.w.new(), self.w.new()
            self.w.emit(f"{b} = add {it} {half}, {splat(127)}")
            self.w.emit(f"{e} = shl {it} {b}, {splat(23)}")
            self.w.emit(f"{sc} = bitcast {it} {e} to {self.t}")
            y = self.op("fmul", y, sc)
        y = self.select("ogt", x, self.c(88.72283), self.c(math.inf), y)      # overflow -> inf
        y = self.select("olt", x, self.c(-103.97208), self.c(0.0), y)         # underflow -> 0
        return self.select("uno", x, x, x, y)                                  # nan stays nan

    def erf(self, x) -> str:
        a = self.fn("fabs", x)
        x2 = self.op("fmul", x, x)
        small = self.op("fmul", x, self.poly(x2, [0.0001205499, -0.0008548327, 0.0052239776, -0.0268661707,
                                                  0.1128379167, -0.3761263890, 1.1283791671]))
        t = self.op("fdiv", self.c(1.0), self.fma(a, self.c(0.3275911), self.c(1.0)))
        p = self.op("fmul", t, self.poly(t, [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592]))
        e = self.exp(self.op("fsub", self.c(-0.0), x2))
        big = self.fn("copysign", self.op("fsub", self.c(1.0), self.op("fmul", p, e)), x)
        return self.select("olt", a, self.c(0.5), small, big)


VECTOR_MATH = {"exp": VectorMath.exp, "erf": VectorMath.erf}
