"""Float literals in LLVM IR, straight-line float32 vector math for what libm has only as scalars (exp, erf): the
bodies FunctionWriter (render.py) emits for a vector `exp` or `erf`, and the bf16 pack by integer rounding."""
from __future__ import annotations

import math
import struct


def float_literal(value: float, dtype: str) -> str:
    if dtype == "float32":
        value = struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


# Polynomial coefficients, highest power first, fitted for these forms by iteratively reweighted least squares
# against mpmath (near-minimax relative error of the whole function, in float64):
LOG1P_Q = [0.08734598010778427, -0.14307177066802979, 0.1491791009902954, -0.16570548713207245,
           0.1996208131313324, -0.25001755356788635, 0.33333951234817505, -0.49999991059303284]
"""log(1 + f) = f + f^2 Q(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: 3.0e-8"""
EXPM1_R = [0.00019849756790790707, 0.0013996155466884375, 0.008333578705787659, 0.04166536033153534,
           0.166666641831398, 0.5000000596046448]
"""expm1(x) = x + x^2 R(x) for |x| <= 0.5: 3.2e-9"""
TANH_T = [-0.005705144722014666, 0.020639223977923393, -0.0537397563457489, 0.13331443071365356,
          -0.3333328068256378]
"""tanh(x) = x + x^3 T(x^2) for |x| <= 0.625: 4.4e-9"""
SIN_S = [2.7180296910955803e-06, -0.00019839302694890648, 0.008333329111337662, -0.1666666716337204]
"""sin(r) = r + r^3 S(r^2) for |r| <= pi/4: 5.2e-12"""
COS_C = [-2.720487373153446e-07, 2.4799450329737738e-05, -0.0013888883404433727, 0.0416666679084301]
"""cos(r) = 1 - r^2/2 + r^4 C(r^2) for |r| <= pi/4: 1.2e-13"""
ERF_P = [-1.0539241479534667e-08, 4.205949153401889e-06, 0.00036101299338042736, 0.0037418180145323277,
         0.05373140424489975, 0.18379053473472595, 1.1283791065216064]
ERF_Q = [5.863585465704091e-05, 0.0012610076228156686, 0.015179558657109737, 0.11302228271961212,
         0.4962133765220642, 1.0]
ERF_CLAMP = 3.9
"""erf(x) = x P(x^2) / Q(x^2) for |x| <= 3.9: absolute error 3.6e-8 (3.3e-7 evaluated in float32)"""
PIO2 = (1.5707963705062866, -4.371139000186243e-08, -1.7151245100059818e-15)   # pi/2 as three floats
TRIG_LIMIT = 65536.0    # |x| beyond it (or inf, nan): sin/cos of the whole vector by libm, lane by lane


def pack_bf16_words(w, wt: str, lo: str, hi: str) -> str:
    """Vectors lo, hi of float32 -> int32 words of type wt (lo rounded in the low half, hi in the high half), each
    rounded to the nearest bfloat16, ties to even, a NaN made the quiet NaN 0x7FC0 (arith.narrow_storage,
    lane-wise): the pack on a target without vcvtne2ps2bf16, where LLVM would call __truncsfbf2."""
    n = int(wt[1:].split(" x ")[0])
    splat = lambda v: "<" + ", ".join([f"i32 {v}"] * n) + ">"
    ft = f"<{n} x float>"
    halves = []
    for x in (lo, hi):
        b, lsb, bias, s, h, nan, r = (w.new() for _ in range(7))
        w.emit(f"{b} = bitcast {ft} {x} to {wt}")
        w.emit(f"{lsb} = lshr {wt} {b}, {splat(16)}")
        w.emit(f"{bias} = and {wt} {lsb}, {splat(1)}")
        w.emit(f"{s} = add {wt} {b}, {bias}")
        w.emit(f"{h} = add {wt} {s}, {splat(32767)}")
        w.emit(f"{nan} = fcmp uno {ft} {x}, {x}")
        w.emit(f"{r} = select <{n} x i1> {nan}, {wt} {splat(0x7FC00000)}, {wt} {h}")
        halves.append(r)
    low, high, word = w.new(), w.new(), w.new()
    w.emit(f"{low} = lshr {wt} {halves[0]}, {splat(16)}")
    w.emit(f"{high} = and {wt} {halves[1]}, {splat(-65536)}")
    w.emit(f"{word} = or {wt} {low}, {high}")
    return word


class VectorMath:
    """Straight-line float32 vector code for functions libm only has as scalars (no vector math library
    is linked): exp by range reduction to 2^k * poly(r), erf as a rational function; log by exponent and mantissa,
    log1p, expm1 and tanh from them with polynomials near 0, sin and cos by reduction modulo pi/2."""

    def __init__(self, w, t: str):
        self.w, self.t = w, t
        self.n = int(t[1:].split(" x ")[0])
        self.it = f"<{self.n} x i32>"
        self.scalef = self.n == 16 and w.m.caps.scalef     # 2^k by one vscalefps (_times_2k)

    def c(self, v: float) -> str:
        return "<" + ", ".join([f"float {float_literal(v, 'float32')}"] * self.n) + ">"

    def op(self, code: str, a: str, b: str) -> str:
        r = self.w.new()
        self.w.emit(f"{r} = {code} {self.t} {a}, {b}")
        return r

    def neg(self, a) -> str:
        r = self.w.new()
        self.w.emit(f"{r} = fneg {self.t} {a}")
        return r

    def fma(self, a, b, c, exact: bool = False) -> str:
        """a * b + c: fused where the target has FMA or `exact` (an argument reduction whose constant has all 24
        bits; elsewhere a multiply and an add, as Cephes' constants are made for, not a libm call per lane)."""
        fn = "fma" if exact or self.w.m.caps.fma else "fmuladd"
        return self.w.call(f"llvm.{fn}.v{self.n}f32", self.t, [(self.t, a), (self.t, b), (self.t, c)])

    def fn(self, name, *args) -> str:
        if name in ("minnum", "maxnum") and not self.w.m.libm:
            # no libm (wasm): LLVM lowers minnum to a call of fminf; the nan-propagating minimum is one instruction,
            # and every caller here selects a nan input's lanes back (or clamps a value that is never nan)
            name = name[:3] + "imum"
        return self.w.call(f"llvm.{name}.v{self.n}f32", self.t, [(self.t, a) for a in args])

    def poly(self, x, coefs) -> str:
        p = self.c(coefs[0])
        for k in coefs[1:]:
            p = self.fma(p, x, self.c(k))
        return p

    def mask(self, cond_code, a, b, ints: bool = False) -> str:
        """Lanes where a <cond_code> b: fcmp over the float vectors, icmp over the int32 ones."""
        m = self.w.new()
        self.w.emit(f"{m} = {'icmp' if ints else 'fcmp'} {cond_code} {self.it if ints else self.t} {a}, {b}")
        return m

    def select(self, cond_code, a, b, yes, no) -> str:
        return self.select_mask(self.mask(cond_code, a, b), yes, no)

    def select_mask(self, mask, yes, no) -> str:
        r = self.w.new()
        self.w.emit(f"{r} = select <{self.n} x i1> {mask}, {self.t} {yes}, {self.t} {no}")
        return r

    def exp(self, x) -> str:
        """One polynomial for the whole range: 2^k is applied as 2^(k>>1) * 2^(k-(k>>1)), two normal floats, so
        k in [-150, 128] neither overflows the exponent field nor needs a second path for denormal results. With
        AVX-512, vscalefps applies 2^k in one step, rounding a denormal result once and an overflow to inf, so x
        clamped to [-104, 89] (a nan staying nan) needs no selects."""
        if self.scalef:
            k, y = self._exp_reduced(self.clamp_keep_nan(x, -104.0, 89.0))
            return self._times_2k(y, k)
        xc = self.fn("minnum", self.fn("maxnum", x, self.c(-104.0)), self.c(88.72283))
        k, y = self._exp_reduced(xc)                                             # k in [-150, 128]
        ki = self.convert("fptosi", k, self.t, self.it)
        k1 = self.ints("ashr", ki, self.isplat(1))
        k2 = self.ints("sub", ki, k1)
        for half in (k1, k2):
            e = self.ints("shl", self.ints("add", half, self.isplat(127)), self.isplat(23))
            y = self.op("fmul", y, self.convert("bitcast", e, self.it, self.t))
        y = self.select("ogt", x, self.c(88.72283), self.c(math.inf), y)      # overflow -> inf
        y = self.select("olt", x, self.c(-103.97208), self.c(0.0), y)         # underflow -> 0
        return self.select("uno", x, x, x, y)                                  # nan stays nan

    def _exp_reduced(self, t):
        """(k, exp(r)) with t = k ln2 + r, |r| <= ln2 / 2: exp(t) is that times 2^k."""
        k = self.fn("roundeven", self.op("fmul", t, self.c(1.4426950408889634)))
        r = self.fma(k, self.c(-0.693359375), t)
        return k, self._exp_poly(self.fma(k, self.c(2.12194440e-4), r))

    def _exp_poly(self, r) -> str:
        """exp(r) for |r| <= ln2 / 2: 1 + r + r^2 P(r)."""
        p = self.poly(r, [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                          1.6666665459e-1, 5.0000001201e-1])
        return self.fma(self.op("fmul", p, r), r, self.op("fadd", r, self.c(1.0)))

    def exp_within(self, t) -> str:
        """exp(t) for t already within +-87.6: k in [-126, 126], so 2^k is one normal float: one scaling
        and no overflow, underflow or nan selects."""
        k, y = self._exp_reduced(t)
        return self._times_2k(y, k)

    def _times_2k(self, y, k) -> str:
        """y * 2^k for an integral float k: one vscalefps for a 16-lane vector on AVX-512 (any k), else 2^k's
        exponent bits built as integers (three more instructions; k in [-126, 126])."""
        if self.scalef:
            return self.w.call("llvm.x86.avx512.mask.scalef.ps.512", self.t,
                               [(self.t, y), (self.t, k), (self.t, y), ("i16", "-1"), ("i32", "4")])
        e = self.ints("shl", self.ints("add", self.convert("fptosi", k, self.t, self.it), self.isplat(127)),
                      self.isplat(23))
        return self.op("fmul", y, self.convert("bitcast", e, self.it, self.t))

    def clamp_keep_nan(self, x, lo: float, hi: float) -> str:
        """x clamped to [lo, hi], a nan staying nan: select(c > x, c, x) is x86's maxps(c, x) (and the min alike),
        which returns its second operand when unordered, one instruction each."""
        x = self.select("ogt", self.c(lo), x, self.c(lo), x)
        return self.select("olt", self.c(hi), x, self.c(hi), x)

    def sigmoid(self, x) -> str:
        """1 / (1 + exp(-x)) with x clamped to +-87.6 (exp_within; beyond, sigmoid is 1 in float32, or under
        9.1e-39 where this gives 9.1e-39). With vscalefps a nan goes through the clamp and the arithmetic as a nan,
        so it needs no select of its own; -x folds into the reduction's first FMA."""
        xc = self.clamp_keep_nan(x, -87.6, 87.6)
        k = self.fn("roundeven", self.op("fmul", xc, self.c(-1.4426950408889634)))
        r = self.fma(k, self.c(2.12194440e-4), self.fma(k, self.c(-0.693359375), self.neg(xc)))
        s = self.op("fdiv", self.c(1.0), self.op("fadd", self._times_2k(self._exp_poly(r), k), self.c(1.0)))
        # without vscalefps, 2^k goes through fptosi, which makes a nan k poison: the nan lanes are selected back
        return s if self.scalef else self.select("uno", x, x, x, s)

    def erf(self, x) -> str:
        """x P(x^2) / Q(x^2) on x clamped to +-ERF_CLAMP (erf is 1 in float32 beyond)."""
        xc = self.clamp_keep_nan(x, -ERF_CLAMP, ERF_CLAMP)          # a nan goes through as a nan
        t = self.op("fmul", xc, xc)
        y = self.op("fdiv", self.op("fmul", xc, self.poly(t, ERF_P)), self.poly(t, ERF_Q))
        return self.clamp_keep_nan(y, -1.0, 1.0)

    def ints(self, code: str, a: str, b: str) -> str:
        r = self.w.new()
        self.w.emit(f"{r} = {code} {self.it} {a}, {b}")
        return r

    def isplat(self, v: int) -> str:
        return "<" + ", ".join([f"i32 {v}"] * self.n) + ">"

    def convert(self, code: str, a: str, src: str, dst: str) -> str:
        r = self.w.new()
        self.w.emit(f"{r} = {code} {src} {a} to {dst}")
        return r

    def log(self, x) -> str:
        """x = 2^e * m with m in [sqrt(1/2), sqrt(2)), log(x) = e ln 2 + log1p(m - 1); denormals are scaled by 2^23
        first."""
        tiny = self.mask("olt", x, self.c(1.1754943508222875e-38))
        xs = self.select_mask(tiny, self.op("fmul", x, self.c(8388608.0)), x)
        bits = self.convert("bitcast", xs, self.t, self.it)
        mbits = self.ints("or", self.ints("and", bits, self.isplat(0x7FFFFF)), self.isplat(0x3F800000))
        m = self.convert("bitcast", mbits, self.it, self.t)
        e = self.convert("sitofp", self.ints("sub", self.ints("ashr", bits, self.isplat(23)), self.isplat(127)),
                         self.it, self.t)
        e = self.op("fsub", e, self.select_mask(tiny, self.c(23.0), self.c(0.0)))
        hi = self.mask("ogt", m, self.c(1.4142135623730951))
        m = self.select_mask(hi, self.op("fmul", m, self.c(0.5)), m)
        e = self.op("fadd", e, self.select_mask(hi, self.c(1.0), self.c(0.0)))
        f = self.op("fsub", m, self.c(1.0))
        y = self.fma(self.op("fmul", f, f), self.poly(f, LOG1P_Q), f)
        y = self.fma(e, self.c(-2.12194440e-4), y)
        y = self.fma(e, self.c(0.693359375), y)
        y = self.select("oeq", x, self.c(math.inf), self.c(math.inf), y)
        y = self.select("oeq", x, self.c(0.0), self.c(-math.inf), y)
        y = self.select("olt", x, self.c(0.0), self.c(math.nan), y)
        return self.select("uno", x, x, x, y)

    def log2(self, x) -> str:
        return self.op("fmul", self.log(x), self.c(1.4426950408889634))

    def log10(self, x) -> str:
        return self.op("fmul", self.log(x), self.c(0.4342944819032518))

    def log1p(self, x) -> str:
        """log(u) for u = 1 + x, plus the rounding error of u relative to u."""
        u = self.op("fadd", x, self.c(1.0))
        lu = self.log(u)
        fix = self.op("fdiv", self.op("fsub", x, self.op("fsub", u, self.c(1.0))), u)
        y = self.op("fadd", lu, fix)
        y = self.select("ogt", u, self.c(0.0), y, lu)                 # u <= 0 or nan: log's -inf / nan
        return self.select("oeq", u, self.c(math.inf), lu, y)        # u = inf: inf

    def expm1(self, x) -> str:
        small = self.fma(self.op("fmul", x, x), self.poly(x, EXPM1_R), x)
        big = self.op("fsub", self.exp(x), self.c(1.0))
        return self.select("olt", self.fn("fabs", x), self.c(0.5), small, big)

    def tanh(self, x) -> str:
        """x + x^3 T(x^2) near 0, else sign(x) (1 - 2 / (exp(2|x|) + 1)) with |x| clamped to 9.1, where tanh is 1 in
        float32 (exp_within: no overflow to guard); nan stays nan."""
        a = self.fn("fabs", x)
        x2 = self.op("fmul", x, x)
        small = self.fma(self.op("fmul", x, x2), self.poly(x2, TANH_T), x)
        ac = self.fn("minnum", a, self.c(9.1))
        e = self.exp_within(self.op("fadd", ac, ac))
        big = self.op("fsub", self.c(1.0), self.op("fdiv", self.c(2.0), self.op("fadd", e, self.c(1.0))))
        big = self.fn("copysign", big, x)
        return self.select("uno", x, x, x, self.select("olt", a, self.c(0.625), small, big))

    def sin(self, x) -> str:
        return self.trig(x, 0)

    def cos(self, x) -> str:
        return self.trig(x, 1)

    def trig(self, x, quarter: int) -> str:
        """sin (quarter 0) or cos (quarter 1) of x = k pi/2 + r, |r| <= pi/4: by k mod 4, +-sin(r) or +-cos(r).
        A vector with a lane beyond TRIG_LIMIT (where three floats of pi/2 no longer reduce exactly), inf or
        nan goes to libm's scalar sin/cos instead, lane by lane."""
        k = self.fn("roundeven", self.op("fmul", x, self.c(0.6366197723675814)))
        k = self.fn("minnum", self.fn("maxnum", k, self.c(-1048576.0)), self.c(1048576.0))
        r = x
        for part in PIO2:
            r = self.fma(k, self.c(-part), r, exact=True)
        r2 = self.op("fmul", r, r)
        s = self.fma(self.op("fmul", r, r2), self.poly(r2, SIN_S), r)
        c = self.fma(self.op("fmul", r2, r2), self.poly(r2, COS_C), self.fma(r2, self.c(-0.5), self.c(1.0)))
        q = self.ints("add", self.convert("fptosi", k, self.t, self.it), self.isplat(quarter))
        odd = self.mask("ne", self.ints("and", q, self.isplat(1)), "zeroinitializer", ints=True)
        v = self.select_mask(odd, c, s)
        neg = self.mask("ne", self.ints("and", q, self.isplat(2)), "zeroinitializer", ints=True)
        fast = self.select_mask(neg, self.op("fsub", self.c(-0.0), v), v)
        far = self.mask("ugt", self.fn("fabs", x), self.c(TRIG_LIMIT))
        return self.unless(far, fast, lambda: self.fn("cos" if quarter else "sin", x))

    def unless(self, mask, value, other) -> str:
        """value, or other() (emitted in a block of its own) when any lane of mask is set."""
        w = self.w
        fn = f"llvm.vector.reduce.or.v{self.n}i1"
        w.m.declare(fn, "i1", [f"<{self.n} x i1>"])
        anyl = w.new()
        w.emit(f"{anyl} = call i1 @{fn}(<{self.n} x i1> {mask})")
        pre, slow, join = w.block, w.label("mslow"), w.label("mjoin")
        w.emit(f"br i1 {anyl}, label %{slow}, label %{join}")
        w.start_block(slow)
        alt = other()
        end = w.block
        w.emit(f"br label %{join}")
        w.start_block(join)
        r = w.new()
        w.emit(f"{r} = phi {self.t} [ {value}, %{pre} ], [ {alt}, %{end} ]")
        return r


VECTOR_MATH = {"exp": VectorMath.exp, "erf": VectorMath.erf, "log": VectorMath.log, "log2": VectorMath.log2,
               "log10": VectorMath.log10, "log1p": VectorMath.log1p, "expm1": VectorMath.expm1,
               "tanh": VectorMath.tanh, "sin": VectorMath.sin, "cos": VectorMath.cos, "sigmoid": VectorMath.sigmoid}
