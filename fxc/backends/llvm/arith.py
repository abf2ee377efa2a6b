"""LLVM IR types of the loop IR's dtypes, and the scalar arithmetic that takes more than one instruction.

Takes SSA operand names and dtypes, and emits instruction lines through the FunctionWriter (render.py) that
it is a base class of:
- integer division and modulo that never trap (a zero divisor raises the module's division-by-zero flag, MIN / -1
  wraps), and Python-style floor division and modulo;
- CheckIndex: the bounds check that records the first out-of-range index of a call;
- dtype conversions as PyTorch makes them (float -> int saturating to x86's "integer indefinite", float16 and
  bfloat16 through float32 with round to nearest even).
"""
from __future__ import annotations

from ...errors import LoweringError
from ...symbolic.expr import FLOATS, STORAGE_FLOATS, Expr, lanes_of, scalar_of
from .mathlib import float_literal

LTYPE = {"float32": "float", "float64": "double", "int64": "i64", "int32": "i32", "int16": "i16",
         "int8": "i8", "uint8": "i8", "bool": "i1", "float16": "half", "bfloat16": "i16"}   # bfloat16: raw bits
MTYPE = dict(LTYPE, bool="i8")     # in-memory type
UNSIGNED = ("uint8", "bool")
_VECTOR_CASTS = {"float32", "int32", "int8", "uint8"}
# float32 lanes -> int32 by truncation, NaN and out of range the "integer indefinite" MIN (Caps.cvtt): x86's
# cvttps2dq, one instruction for the five of the generic form; lanes -> (the intrinsic, its further operands)
_CVTTPS2DQ = {4: ("llvm.x86.sse2.cvttps2dq", []), 8: ("llvm.x86.avx.cvtt.ps2dq.256", []),
              16: ("llvm.x86.avx512.mask.cvttps2dq.512", [("<16 x i32>", "zeroinitializer"), ("i16", "-1"),
                                                         ("i32", "4")])}


def lty(dtype: str) -> str:
    """LLVM type of a scalar or vector ("float32x16" -> <16 x float>) dtype."""
    n = lanes_of(dtype)
    return LTYPE[dtype] if n == 1 else f"<{n} x {LTYPE[scalar_of(dtype)]}>"


def float_suffix(dt: str) -> str:
    """The type suffix of a float intrinsic: f32, f64, v16f32, ..."""
    s = "f32" if scalar_of(dt) == "float32" else "f64"
    return s if lanes_of(dt) == 1 else f"v{lanes_of(dt)}{s}"


def _bits(dt: str) -> int:
    return {"bool": 1, "int8": 8, "uint8": 8, "int16": 16, "int32": 32, "int64": 64}[dt]


class Arithmetic:
    """FunctionWriter's multi-instruction arithmetic (a base class: it uses the writer's new, label, emit,
    start_block, call and expr, and its module `m`)."""

    def _int_div(self, op, x, y, t, unsigned):
        """Division that never traps: y == 0 gives x (no SIGFPE) and raises the module's division-by-zero flag
        (the entry then returns DIV_BY_ZERO, as eager raises), and MIN / -1 wraps."""
        z, m1, safe = self.new(), self.new(), self.new()
        self.emit(f"{z} = icmp eq {t} {y}, 0")
        self._flag_if(z, t)
        if unsigned:
            self.emit(f"{safe} = select i1 {z}, {t} 1, {t} {y}")
            r = self.new()
            self.emit(f"{r} = {'udiv' if 'div' in op else 'urem'} {t} {x}, {safe}")
            return r
        self.emit(f"{m1} = icmp eq {t} {y}, -1")
        bad = self.new()
        self.emit(f"{bad} = or i1 {z}, {m1}")
        self.emit(f"{safe} = select i1 {bad}, {t} 1, {t} {y}")
        r = self.new()
        if "div" in op:
            self.emit(f"{r} = sdiv {t} {x}, {safe}")
            if op == "floordiv":
                rem = self.new()
                self.emit(f"{rem} = srem {t} {x}, {safe}")
                r = self._floor_adjust(r, rem, safe, t)
            neg = self.new()
            self.emit(f"{neg} = sub {t} 0, {x}")
            out = self.new()
            self.emit(f"{out} = select i1 {m1}, {t} {neg}, {t} {r}")
            return out
        self.emit(f"{r} = srem {t} {x}, {safe}")
        if op == "floormod":
            r = self._fix_mod(r, safe, t, float_=False)
        out = self.new()
        self.emit(f"{out} = select i1 {m1}, {t} 0, {t} {r}")
        return out

    def _flag_if(self, cond: str, t: str):
        """Set @fxc_div_by_zero when cond (any lane of it) holds: a branch, so the hot path only tests."""
        if t.startswith("<"):
            lanes = t[1:].split(" x ")[0]
            anyc = self.new()
            self.emit(f"{anyc} = call i1 @llvm.vector.reduce.or.v{lanes}i1(<{lanes} x i1> {cond})")
            self.m.declare(f"llvm.vector.reduce.or.v{lanes}i1", "i1", [f"<{lanes} x i1>"])
            cond = anyc
        set_, cont = self.label("divzero"), self.label("divok")
        self.emit(f"br i1 {cond}, label %{set_}, label %{cont}")
        self.start_block(set_)
        self.emit("store atomic i32 1, ptr @fxc_div_by_zero monotonic, align 4")
        self.emit(f"br label %{cont}")
        self.start_block(cont)

    def check_index(self, i, size, wrap, op) -> str:
        """CheckIndex: the (wrapped) index when in range, else 0; the first out-of-range index of a call records
        (op, index, size) in @fxc_index_error and raises @fxc_index_flag (the entry returns INDEX_OUT_OF_RANGE)."""
        x = self.expr(i)
        if wrap:
            neg, plus, x0, x = self.new(), self.new(), x, self.new()
            self.emit(f"{neg} = icmp slt i64 {x0}, 0\n  {plus} = add i64 {x0}, {size}")
            self.emit(f"{x} = select i1 {neg}, i64 {plus}, i64 {x0}")
        ok, first, won = self.new(), self.new(), self.new()
        self.emit(f"{ok} = icmp ult i64 {x}, {size}")
        bad, record, cont = self.label("idxbad"), self.label("idxrec"), self.label("idxok")
        self.emit(f"br i1 {ok}, label %{cont}, label %{bad}")
        self.start_block(bad)
        self.emit(f"{won} = cmpxchg ptr @fxc_index_flag, i32 0, i32 1 monotonic monotonic")
        self.emit(f"{first} = extractvalue {{ i32, i1 }} {won}, 1")
        self.emit(f"br i1 {first}, label %{record}, label %{cont}")
        self.start_block(record)
        for k, v in enumerate((op, self.expr(i), size)):
            slot = self.new()
            self.emit(f"{slot} = getelementptr i64, ptr @fxc_index_error, i64 {k}")
            self.emit(f"store atomic i64 {v}, ptr {slot} monotonic, align 8")
        self.emit(f"br label %{cont}")
        self.start_block(cont)
        r = self.new()
        self.emit(f"{r} = select i1 {ok}, i64 {x}, i64 0")
        return r

    def _floor_adjust(self, q, rem, d, t):
        nz, sx, fix, one, out = self.new(), self.new(), self.new(), self.new(), self.new()
        self.emit(f"{nz} = icmp ne {t} {rem}, 0")
        self.emit(f"{sx} = xor {t} {rem}, {d}")
        self.emit(f"{fix} = icmp slt {t} {sx}, 0")
        self.emit(f"{one} = and i1 {nz}, {fix}")
        self.emit(f"{out} = select i1 {one}, {t} {self._sub1(q, t)}, {t} {q}")
        return out

    def _sub1(self, q, t):
        r = self.new()
        self.emit(f"{r} = sub {t} {q}, 1")
        return r

    def _fix_mod(self, m, d, t, float_: bool):
        """python-style modulo: add d when m != 0 and sign(m) != sign(d)."""
        nz, ms, ds, diff, both, add, out = (self.new() for _ in range(7))
        if float_:
            self.emit(f"{nz} = fcmp une {t} {m}, 0.0")
            self.emit(f"{ms} = fcmp olt {t} {m}, 0.0")
            self.emit(f"{ds} = fcmp olt {t} {d}, 0.0")
            self.emit(f"{diff} = xor i1 {ms}, {ds}")
            self.emit(f"{both} = and i1 {nz}, {diff}")
            self.emit(f"{add} = fadd {t} {m}, {d}")
        else:
            self.emit(f"{nz} = icmp ne {t} {m}, 0")
            self.emit(f"{ms} = icmp slt {t} {m}, 0")
            self.emit(f"{ds} = icmp slt {t} {d}, 0")
            self.emit(f"{diff} = xor i1 {ms}, {ds}")
            self.emit(f"{both} = and i1 {nz}, {diff}")
            self.emit(f"{add} = add {t} {m}, {d}")
        self.emit(f"{out} = select i1 {both}, {t} {add}, {t} {m}")
        return out

    def cast(self, to: str, a: Expr) -> str:
        fr = a.dtype
        if lanes_of(fr) > 1 and scalar_of(fr) == "bool" and scalar_of(to) in ("float32", "float64") \
                and lanes_of(to) == lanes_of(fr):            # a mask as 0.0 / 1.0 lanes (dropout's backward)
            r = self.new()
            self.emit(f"{r} = uitofp {lty(fr)} {self.expr(a)} to {lty(to)}")
            return r
        n = lanes_of(fr)
        if n > 1 and lanes_of(to) == n and {scalar_of(fr), scalar_of(to)} <= _VECTOR_CASTS:
            return self.vector_cast(scalar_of(fr), scalar_of(to), n, self.expr(a))
        if n > 1 or lanes_of(to) > 1:
            raise LoweringError(f"vector cast {fr} -> {to} is not renderable")
        x = self.expr(a)
        if fr == to:
            return x
        return self.cast_value(fr, to, x)

    def vector_cast(self, fr: str, to: str, n: int, x: str) -> str:
        """cast_value lane-wise on n-lane vectors of int32 / int8 / uint8 / float32 (the int8 kernels' epilogues):
        float -> int as the scalar cast (truncated to int32, NaN and out of range the "integer indefinite" MIN, then
        wrapped to the narrower type)."""
        tf, tt = f"<{n} x {LTYPE[fr]}>", f"<{n} x {LTYPE[to]}>"
        if fr == to:
            return x
        r = self.new()
        caps = self.m.caps
        if fr == "float32" and caps.cvtt and n in _CVTTPS2DQ and 32 * n <= caps.vector_bits:   # that cast on x86
            fn, rest = _CVTTPS2DQ[n]
            w = self.call(fn, f"<{n} x i32>", [(tf, x)] + rest)
            if to == "int32":
                return w
            self.emit(f"{r} = trunc <{n} x i32> {w} to {tt}")
        elif fr in FLOATS:
            wide = f"<{n} x i32>"       # the lanes in range converted (fptosi.sat would be scalarized)
            ab, ok, safe, iv, w = self.call(f"llvm.fabs.v{n}f32", tf, [(tf, x)]), *(self.new() for _ in range(4))
            lim = "<" + ", ".join([f"float {float_literal(2.0 ** 31, fr)}"] * n) + ">"
            self.emit(f"{ok} = fcmp olt {tf} {ab}, {lim}")
            self.emit(f"{safe} = select <{n} x i1> {ok}, {tf} {x}, {tf} zeroinitializer")
            self.emit(f"{iv} = fptosi {tf} {safe} to {wide}")
            self.emit(f"{w} = select <{n} x i1> {ok}, {wide} {iv}, {wide} <" + ", ".join([f"i32 {-2 ** 31}"] * n)
                      + ">")
            if to == "int32":
                return w
            self.emit(f"{r} = trunc {wide} {w} to {tt}")
        elif to in FLOATS:
            self.emit(f"{r} = {'uitofp' if fr in UNSIGNED else 'sitofp'} {tf} {x} to {tt}")
        else:
            op = "trunc" if _bits(to) < _bits(fr) else ("zext" if fr in UNSIGNED else "sext")
            self.emit(f"{r} = {op} {tf} {x} to {tt}")
        return r

    def cast_value(self, fr: str, to: str, x: str) -> str:
        """Convert SSA value x from dtype fr to dtype to. float16/bfloat16 go through float32 both ways, as
        PyTorch converts them (c10::Half/BFloat16 hold a float constructor: double -> float -> half)."""
        if fr in STORAGE_FLOATS:
            x, fr = self.widen_storage(fr, x), "float32"
            if to == fr:
                return x
        if to in STORAGE_FLOATS:
            return self.narrow_storage(to, x if fr == "float32" else self.cast_value(fr, "float32", x))
        tf, tt = LTYPE[fr], LTYPE[to]
        r = self.new()
        if to == "bool":
            self.emit(f"{r} = fcmp une {tf} {x}, 0.0" if fr in FLOATS else f"{r} = icmp ne {tf} {x}, 0")
        elif fr in FLOATS and to in FLOATS:
            self.emit(f"{r} = {'fpext' if to == 'float64' else 'fptrunc'} {tf} {x} to {tt}")
        elif fr in FLOATS:      # as x86 (and so PyTorch): truncate to int32 (int64 for int64), NaN and out of
            bits = 64 if to == "int64" else 32      # range give the "integer indefinite" MIN, narrower types wrap
            wide = f"i{bits}"
            iv = self.call(f"llvm.fptosi.sat.{wide}.{float_suffix(fr)}", wide, [(tf, x)])
            a, ok, w = self.call(f"llvm.fabs.{float_suffix(fr)}", tf, [(tf, x)]), self.new(), self.new()
            self.emit(f"{ok} = fcmp olt {tf} {a}, {float_literal(2.0 ** (bits - 1), fr)}")
            self.emit(f"{w} = select i1 {ok}, {wide} {iv}, {wide} {-2 ** (bits - 1)}")
            if tt == wide:
                return w
            self.emit(f"{r} = trunc {wide} {w} to {tt}")
        elif to in FLOATS:
            self.emit(f"{r} = {'uitofp' if fr in UNSIGNED else 'sitofp'} {tf} {x} to {tt}")
        else:
            bf, bt = _bits(fr), _bits(to)
            if bf == bt:
                return x
            op = "trunc" if bt < bf else ("zext" if fr in UNSIGNED else "sext")
            self.emit(f"{r} = {op} {tf} {x} to {tt}")
        return r

    def widen_storage(self, fr: str, x: str) -> str:
        """float16/bfloat16 -> float32 (exact)."""
        r = self.new()
        if fr == "float16":
            self.emit(f"{r} = fpext half {x} to float")
            return r
        z, s = self.new(), self.new()      # bfloat16 is the high half of a float32
        self.emit(f"{z} = zext i16 {x} to i32")
        self.emit(f"{s} = shl i32 {z}, 16")
        self.emit(f"{r} = bitcast i32 {s} to float")
        return r

    def narrow_storage(self, to: str, x: str) -> str:
        """float32 -> float16/bfloat16, round to nearest even (bfloat16 NaN -> 0x7FC0, as c10::BFloat16)."""
        r = self.new()
        if to == "float16":
            self.emit(f"{r} = fptrunc float {x} to half")
            return r
        b, lsb, bias, s, h, t, nan = (self.new() for _ in range(7))
        self.emit(f"{b} = bitcast float {x} to i32")
        self.emit(f"{lsb} = lshr i32 {b}, 16")
        self.emit(f"{bias} = and i32 {lsb}, 1")
        self.emit(f"{s} = add i32 {b}, {bias}")
        self.emit(f"{h} = add i32 {s}, 32767")
        self.emit(f"{t} = lshr i32 {h}, 16")
        tr = self.new()
        self.emit(f"{tr} = trunc i32 {t} to i16")
        self.emit(f"{nan} = fcmp uno float {x}, {x}")
        self.emit(f"{r} = select i1 {nan}, i16 32704, i16 {tr}")
        return r
