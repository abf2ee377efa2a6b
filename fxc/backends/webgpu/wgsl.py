"""The WGSL renderer: device loop-IR Kernels -> WGSL compute shaders (the `webgpu` target).

Takes Kernels whose launch geometry is set (fxc.lowering.schedules.gpu) and whose expressions are scalar
(fxc.lowering.legalize.scalarize); produces the program as JSON text: per kernel its compute shader and its
parameter count (fxc.runtime.browser.webgpu runs it in the browser).

Memory. WebGPU forbids two writable bindings of one buffer in a dispatch, so a shader sees all of a module's
tensors through one binding, the arena `fxc_m` (32-bit words; fxc.runtime.browser.webgpu lays it out), with the byte
offset of each parameter in a uniform (`fxc_o`, set per launch; -1: an absent optional input). float32 and int32
are words read and written through `bitcast`; int64 is two words (the low word the value, the high word checked
to be its sign); int8 / uint8 / bool / int16 are bytes and half-words of words: a kernel that stores one declares
the arena `array<atomic<u32>>` and writes them with atomicAnd + atomicOr so neighbours never race (its other
accesses are atomicLoad / atomicStore); every other kernel declares it `array<u32>`. A second buffer `fxc_err`
(atomic words) reports what the CPU reports as an error: word 0 is 1 after an integer division by zero, 2 after
an int64 value that does not fit 32 bits, 3 after an index out of range (words 1-3: its op + 1, the index, the
dimension's size: the first of a call).

Types and semantics: WGSL has f32, i32, u32 and bool, no 64-bit integers and no implicit conversions. A kernel
indexes in 32 bits; int64 values are computed in 32 bits only where that is provably exact (the interval analysis
of fxc.lowering.int_ranges, `check_int64_narrowable`), int64 loads and float -> int64 casts are checked on the device;
anything else is a LoweringError (the graph runs elsewhere: eager under torch.compile). float64 / float16 /
bfloat16 are refused the same way. Semantics follow the other device renderers: NaN-propagating max/min (NaN
tested on the bits, which no fast-math assumption removes), float -> int casts give INT_MIN for NaN and out-of-range
values, integer division never traps, pow of a negative base with an integral exponent as in C, round to even.
Constants are `let` values, never WGSL const-expressions (a const-expression that overflows, divides by zero or
makes an infinity is a shader-creation error); infinities and NaN come from the bits in a `var<private>`.
"""
from __future__ import annotations

import json
import math
import struct

from ...errors import LoweringError
from ...lowering.int_ranges import check_int64_narrowable
from ...lowering.loop_ir import BOUND_KINDS, Barrier, Buffer, For, Kernel, LetStmt, Store, walk_stmts
from ...runtime.launch import dispatch_of
from ...symbolic.expr import Bf16Half, Cast, CheckIndex, Const, Expr, PackBf16, Present, Select, Var, children, lanes_of
from ..cstyle import I32_MAX, I32_MIN, CStyleRenderer, int32_const

VALUE = {"float32": "f32", "int64": "i32", "int32": "i32", "int16": "i32", "int8": "i32", "uint8": "i32",
         "bool": "bool"}
REFUSED = {"float64": "float64 (WebGPU has no f64)", "float16": "float16", "bfloat16": "bfloat16"}
SHIFT = {"float32": 2, "int32": 2, "int64": 2, "int16": 1, "int8": 0, "uint8": 0, "bool": 0}   # bytes -> units
SUBWORD = ("int16", "int8", "uint8", "bool")
INT_MIN = "i32(-2147483648)"


def _helper(name):
    def code(r, dt, *args):
        r.used.add(name)
        return f"fxc_{name}({', '.join(args)})"
    return code


def _fmaxmin(fn):
    """max/min that propagate NaN (as PyTorch and the other backends)."""
    def code(r, dt, a, b):
        r.used.add("isnan")
        return f"select({fn}({a}, {b}), {a} + {b}, fxc_isnan({a}) || fxc_isnan({b}))"
    return code


CODE_FOR_OP = {
    "max.f": _fmaxmin("max"), "min.f": _fmaxmin("min"), "max.i": "max({0}, {1})", "min.i": "min({0}, {1})",
    "max.b": "({0} || {1})", "min.b": "({0} && {1})",
    "pow.f": _helper("pow"), "atan2.f": _helper("atan2"), "hypot.f": _helper("hypot"),
    "copysign.f": "bitcast<f32>((bitcast<u32>({0}) & 0x7FFFFFFFu) | (bitcast<u32>({1}) & 0x80000000u))",
    "fma.f": "fma({0}, {1}, {2})",
    "check_index": "fxc_check_index({0}, {1}, {2}, {3})",     # records the first bad index of a call (fxc_err 3)
    "truncmod.f": _helper("fmod"), "floordiv.f": "floor({0} / {1})", "truncdiv.f": "trunc({0} / {1})",
    "floormod.f": _helper("floormod_f"),
    "div.i": _helper("truncdiv"), "truncdiv.i": _helper("truncdiv"), "floordiv.i": _helper("floordiv"),
    "truncmod.i": _helper("truncmod"), "floormod.i": _helper("floormod"),
    "and.b": "({0} && {1})", "or.b": "({0} || {1})", "xor.b": "({0} != {1})",
    "shl.i": "({0} << u32({1}))", "shr.i": "({0} >> u32({1}))",
    "neg": "(-{0})", "not.b": "(!{0})", "not.i": "(~{0})", "abs.f": "abs({0})", "abs.i": "abs({0})",
    "isnan.f": _helper("isnan"), "isinf.f": _helper("isinf"), "signbit.f": "((bitcast<u32>({0}) >> 31u) != 0u)",
    "isnan.i": "false", "isinf.i": "false", "signbit.i": "({0} < 0)",
    "sigmoid.f": "(1.0f / (1.0f + exp(-{0})))", "round.f": "round({0})", "log10.f": "(log({0}) * 0.4342944819f)",
    "tanh.f": _helper("tanh"), "erf.f": _helper("erf"), "expm1.f": _helper("expm1"), "log1p.f": _helper("log1p"),
    "asin.f": "atan2({0}, sqrt((1.0f - {0}) * (1.0f + {0})))",     # as GLSL: native asin / acos may be 1e-4 off
    "acos.f": "atan2(sqrt((1.0f - {0}) * (1.0f + {0})), {0})", "nextafter.f": _helper("nextafter"),
    # SwiftShader's sin / cos are 2e-4 off (WGSL allows 2**-11): reduced by pi/2 in three parts, float32 polynomials
    "sin.f": lambda r, dt, a: (r.used.add("sincos"), f"fxc_sincos({a}).x")[1],
    "cos.f": lambda r, dt, a: (r.used.add("sincos"), f"fxc_sincos({a}).y")[1], "tan.f": _helper("tan"),
    **{f"{fn}.f": fn + "({0})" for fn in ("exp", "log", "sqrt", "floor", "ceil", "trunc",
                                          "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "exp2")},
}

# integer division that never traps: division by zero sets fxc_err 1, MIN / -1 wraps (as on the CPU)
_DIV = {
    "truncdiv": "return select(x / s, -x, y == -1);",
    "truncmod": "return select(x - (x / s) * s, 0, y == -1);",
    "floordiv": "var q = x / s; let m = x - q * s; if (m != 0 && ((m ^ s) < 0)) { q -= 1; } "
                "return select(q, -x, y == -1);",
    "floormod": "var m = x - (x / s) * s; if (m != 0 && ((m ^ s) < 0)) { m += s; } return select(m, 0, y == -1);",
}

_HELPERS = {
    "isnan": "fn fxc_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7FFFFFFFu) > 0x7F800000u; }",
    "isinf": "fn fxc_isinf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7FFFFFFFu) == 0x7F800000u; }",
    "signbit": "fn fxc_signbit(x: f32) -> bool { return (bitcast<u32>(x) >> 31u) != 0u; }",
    "pow": """fn fxc_pow(x: f32, y: f32) -> f32 {
  if (y == 0.0f) { return 1.0f; }
  if (fxc_isnan(x) || fxc_isnan(y)) { return x + y; }
  let odd = fract(y * 0.5f) == 0.5f;
  if (x == 0.0f) {
    if (y < 0.0f) { return select(fxc_inf(), -fxc_inf(), odd && fxc_signbit(x)); }
    return select(0.0f, -0.0f, odd && fxc_signbit(x));
  }
  var r = exp2(y * log2(abs(x)));
  if (x < 0.0f) { if (trunc(y) != y) { return fxc_nan(); } if (fract(y * 0.5f) != 0.0f) { r = -r; } }
  return r;
}""",
    "atan2": "fn fxc_atan2(y: f32, x: f32) -> f32 { if (fxc_isnan(x) || fxc_isnan(y)) { return x + y; } "
             "if (y == 0.0f) { if (x > 0.0f || (x == 0.0f && !fxc_signbit(x))) { return y; } "
             "return select(3.14159265358979f, -3.14159265358979f, fxc_signbit(y)); } return atan2(y, x); }",
    "hypot": "fn fxc_hypot(x: f32, y: f32) -> f32 { let a = abs(x); let b = abs(y); let m = max(a, b); "
             "if (fxc_isinf(a) || fxc_isinf(b)) { return fxc_inf(); } if (m == 0.0f) { return 0.0f; } "
             "let p = a / m; let q = b / m; return m * sqrt(p * p + q * q); }",
    "fmod": "fn fxc_fmod(x: f32, y: f32) -> f32 { if (y == 0.0f || fxc_isinf(x)) { return fxc_nan(); } "
            "if (fxc_isinf(y)) { return x; } var r = abs(x) - abs(y) * trunc(abs(x) / abs(y)); "
            "if (r < 0.0f) { r += abs(y); } if (r >= abs(y)) { r -= abs(y); } return select(r, -r, x < 0.0f); }",
    "floormod_f": "fn fxc_floormod_f(x: f32, y: f32) -> f32 { let m = fxc_fmod(x, y); "
                  "return select(m, m + y, m != 0.0f && ((m < 0.0f) != (y < 0.0f))); }",
    "tanh": "fn fxc_tanh(x: f32) -> f32 { if (abs(x) < 0.55f) { let x2 = x * x; return x + x * x2 * "
            "(-0.333333333f + x2 * (0.133333333f + x2 * (-0.0539682540f + x2 * (0.0218694885f + "
            "x2 * -0.00886323552f)))); } let e = exp(-2.0f * abs(x)); let t = (1.0f - e) / (1.0f + e); "
            "return select(t, -t, x < 0.0f); }",
    # erf: W. J. Cody's rational approximations near 0, Numerical Recipes' erfc beyond (float32 accuracy)
    "erf": """fn fxc_erf(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5f) { let t = x * x;
    return x * (1.1283791671f + t * (-0.3761263890f + t * (0.1128379167f + t * (-0.0268661706f
                + t * 0.0052239776f)))); }
  return sign(x) * (1.0f - fxc_erfc_pos(a));
}""",
    "erfc_pos": """fn fxc_erfc_pos(a: f32) -> f32 {
  let t = 1.0f / (1.0f + 0.5f * a);
  return t * exp(-a * a - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f
      + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f)))))))));
}""",
    "nextafter": "fn fxc_nextafter(x: f32, y: f32) -> f32 { if (fxc_isnan(x) || fxc_isnan(y)) { return x + y; } "
                 "if (x == y) { return y; } if (x == 0.0f) { return select(-bitcast<f32>(1u), bitcast<f32>(1u), "
                 "y > 0.0f); } let b = bitcast<u32>(x); "
                 "return bitcast<f32>(select(b - 1u, b + 1u, (x < y) == (x > 0.0f))); }",
    # Cody-Waite reduction by pi/2 (pi/2 split in three floats), Cephes' sinf / cosf polynomials on [-pi/4, pi/4]
    "sincos": """fn fxc_sincos(x: f32) -> vec2<f32> {
  let j = round(x * 0.63661977236f);
  let y = ((x - j * 1.5703125f) - j * 4.837512969970703125e-4f) - j * 7.54978995489188216e-8f;
  let z = y * y;
  let s = y + y * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
  let c = 1.0f - 0.5f * z + z * z * (4.166664568298827e-2f + z * (-1.388731625493765e-3f + z * 2.443315711809948e-5f));
  let q = i32(j) & 3;
  if (q == 0) { return vec2<f32>(s, c); }
  if (q == 1) { return vec2<f32>(c, -s); }
  if (q == 2) { return vec2<f32>(-s, -c); }
  return vec2<f32>(-c, s);
}""",
    "tan": "fn fxc_tan(x: f32) -> f32 { let v = fxc_sincos(x); return v.x / v.y; }",
    "expm1": "fn fxc_expm1(x: f32) -> f32 { let u = exp(x); if (u == 1.0f) { return x; } let m = u - 1.0f; "
             "if (m == -1.0f) { return -1.0f; } if (fxc_isinf(u)) { return u; } return m * x / log(u); }",
    "log1p": "fn fxc_log1p(x: f32) -> f32 { let u = 1.0f + x; if (u == 1.0f) { return x; } "
             "if (fxc_isinf(u)) { return u; } return log(u) * x / (u - 1.0f); }",
}
_NEEDS = {"erf": {"erfc_pos"}, "tan": {"sincos"}, "floormod_f": {"fmod", "isnan", "isinf"}, "fmod": {"isinf"},
          "pow": {"signbit", "isnan"}, "atan2": {"signbit", "isnan"}, "hypot": {"isinf"}, "nextafter": {"isnan"},
          "expm1": {"isinf"}, "log1p": {"isinf"}}
_ORDER = ("isnan", "isinf", "signbit", "sincos", "tan", "erfc_pos", "fmod", "erf", "floormod_f", "pow", "atan2",
          "hypot", "tanh", "expm1", "log1p", "nextafter")

# what every shader starts with; {load} / {store} are the arena word's access (plain, or atomic in a kernel that
# stores bytes)
PREAMBLE = """\
var<private> fxc_nan_bits: u32 = 0x7FC00000u;
var<private> fxc_inf_bits: u32 = 0x7F800000u;
fn fxc_nan() -> f32 {{ return bitcast<f32>(fxc_nan_bits); }}
fn fxc_inf() -> f32 {{ return bitcast<f32>(fxc_inf_bits); }}
fn fxc_ld(w: i32) -> u32 {{ return {load}; }}
fn fxc_st(w: i32, v: u32) {{ {store}; }}
fn fxc_ld64(w: i32) -> i32 {{ let lo = bitcast<i32>(fxc_ld(w));
  if (bitcast<i32>(fxc_ld(w + 1)) != (lo >> 31u)) {{ atomicStore(&fxc_err[0], 2); }} return lo; }}
fn fxc_st64(w: i32, v: i32) {{ fxc_st(w, bitcast<u32>(v)); fxc_st(w + 1, bitcast<u32>(v >> 31u)); }}
fn fxc_narrow(x: f32) -> i32 {{ if (!(abs(x) < 2147483648.0f)) {{ atomicStore(&fxc_err[0], 2); }} return i32(x); }}
fn fxc_check_index(i: i32, size: i32, wrap: i32, op: i32) -> i32 {{
  let j = select(i, i + size, wrap != 0 && i < 0);
  if (j >= 0 && j < size) {{ return j; }}
  if (atomicCompareExchangeWeak(&fxc_err[1], 0, op + 1).exchanged) {{
    atomicStore(&fxc_err[2], i); atomicStore(&fxc_err[3], size); }}
  _ = atomicCompareExchangeWeak(&fxc_err[0], 0, 3);
  return 0;
}}
"""
SUBWORD_STORES = """\
fn fxc_st8(e: i32, v: i32) { let w = e >> 2u; let s = u32(e & 3) * 8u;
  atomicAnd(&fxc_m[w], ~(0xFFu << s)); atomicOr(&fxc_m[w], (bitcast<u32>(v) & 0xFFu) << s); }
fn fxc_st16(e: i32, v: i32) { let w = e >> 1u; let s = u32(e & 1) * 16u;
  atomicAnd(&fxc_m[w], ~(0xFFFFu << s)); atomicOr(&fxc_m[w], (bitcast<u32>(v) & 0xFFFFu) << s); }
"""


class WGSLRenderer(CStyleRenderer):
    has_local = True
    bound_index = {"grid": "fxc_wid", "thread": "fxc_lid"}
    buffer_prefix, var_prefix = "b_", "v_"      # loop-IR names may be WGSL keywords
    types = VALUE
    memory_types = VALUE
    code_for_op = CODE_FOR_OP

    def __init__(self, kernel: Kernel):
        for b in kernel.params:
            if b.dtype in REFUSED:
                raise LoweringError(f"{kernel.name}: buffer {b.name} is {REFUSED[b.dtype]}, which the WGSL renderer "
                                    f"does not compute in; the graph runs on another target")
        super().__init__(kernel)
        self.dims, self.fold = dispatch_of(kernel.launch.grid) if kernel.launch else ((1, 1, 1), None)
        self.atomic = any(isinstance(s, Store) and s.buf.scope == "global" and s.buf.dtype in SUBWORD
                          for s in walk_stmts(kernel.body))

    # -- names, statements ---------------------------------------------------------------------------------
    def kernel_names(self) -> list:
        return [(("offset", j), f"o{j}") for j in range(len(self.kernel.params))]

    def stmt(self, s):
        if isinstance(s, LetStmt):
            value = self.expr(s.value)
            v = self.declare(self.var_name(s.var))
            self.emit(f"let {v}: {VALUE[s.var.dtype]} = {value};")
            self.env[-1][s.var] = v
            self.stmt(s.body)
            return
        super().stmt(s)

    def loop(self, s: For):
        for st in walk_stmts(s.body):      # a value cached before the loop is stale from the 2nd iteration on
            if isinstance(st, Store):
                self.invalidate(st.buf)
            elif isinstance(st, Barrier):
                self.invalidate_shared()
        v = self.var_name(s.var)
        if s.kind in BOUND_KINDS:
            xyz = "xyz"[s.axis]
            if s.kind == "grid" and self.fold == s.axis:
                idx = f"i32(fxc_wid.{xyz} + fxc_wid.{'xyz'[len(self.kernel.launch.grid)]} * 65535u)"
            else:
                idx = f"i32({self.bound_index[s.kind]}.{xyz})"
            self.emit("{")
            self.depth += 1
            self.emit(f"let {v}: i32 = {idx};")
            self.depth -= 1
            self.block(s.body, ((s.var, v),), (v,))
            self.emit("}")
            return
        end = self.expr(s.extent) if not isinstance(s.extent, int) else str(s.extent)
        self.emit(f"for (var {v}: i32 = {s.start}; {v} < {end}; {v}++) {{")
        self.block(s.body, ((s.var, v),), (v,))
        self.emit("}")

    # -- expressions ----------------------------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        v = self.lookup(e)
        if v is not None:
            return v
        if isinstance(e, Var):
            raise LoweringError(f"variable {e} used outside its loop in {self.kernel.name}")
        if lanes_of(e.dtype) > 1:
            raise LoweringError(f"{self.kernel.name}: vector expression {e!r}; scalarize the kernel first")
        if e.dtype in REFUSED:
            raise LoweringError(f"{self.kernel.name}: {REFUSED[e.dtype]} arithmetic; WGSL here computes float32")
        if isinstance(e, Const):
            return self.const(e)
        kids = children(e)
        if kids and all(isinstance(c, Const) for c in kids):    # never a const-expression: one operand a `let`
            t = self.new()
            self.emit(f"let {t}: {VALUE[kids[0].dtype]} = {self.const(kids[0])};")
            self.bind(kids[0], t)
        code = self.compute(e)
        t = self.new()
        self.emit(f"let {t}: {VALUE[e.dtype]} = {code};")
        self.bind(e, t)
        return t

    def compute(self, e):
        if isinstance(e, Present):
            return f"({self.offset(e.args[0])} >= 0)"
        if isinstance(e, Select):
            c, a, b = (self.expr(x) for x in e.args)
            return f"select({b}, {a}, {c})"
        if isinstance(e, (PackBf16, Bf16Half)):
            raise LoweringError(f"{self.kernel.name}: bfloat16 packing; WGSL here computes float32")
        if isinstance(e, CheckIndex):
            i, size, wrap, op = e.args
            if not I32_MIN <= int(size) <= I32_MAX:
                raise LoweringError(f"{self.kernel.name}: a dimension of {size} needs 64-bit indices")
            return f"fxc_check_index({self.expr(i)}, {int(size)}, {int(wrap)}, {int(op)})"
        if isinstance(e, Cast):
            return self.cast_code(e.args[1].dtype, e.args[0], self.expr(e.args[1]))
        return super().compute(e)

    def int_const(self, v: int, dt: str) -> str:
        return int32_const(v, dt, INT_MIN, self.kernel.name, "WGSL")

    def float_const(self, v: float, dt: str) -> str:
        if math.isnan(v):
            return "fxc_nan()"
        if math.isinf(v):
            return "-fxc_inf()" if v < 0 else "fxc_inf()"
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        return f"bitcast<f32>({bits:#010x}u)"      # exact, whatever the compiler's decimal parsing

    def barrier(self) -> str:
        return "workgroupBarrier();"

    def cast_code(self, fr: str, to: str, x: str) -> str:
        if fr == to:
            return x
        if to == "bool":
            return f"({x} != {'0.0f' if fr == 'float32' else '0'})" if fr != "bool" else x
        if to == "float32":
            return f"f32({x})"
        if fr == "bool":
            return f"i32({x})"
        if fr == "float32":
            if to == "int64":
                return f"fxc_narrow({x})"
            w = f"select({INT_MIN}, i32({x}), abs({x}) < 2147483648.0f)"     # x86: NaN / out of range -> MIN
            return w if to == "int32" else self.cast_code("int32", to, w)
        if to == "uint8":
            return f"({x} & 255)"
        if to == "int8":
            return f"extractBits({x}, 0u, 8u)"
        if to == "int16":
            return f"extractBits({x}, 0u, 16u)"
        return x            # int32 <-> int64 (narrowed: the same 32-bit value), and widening of narrower ints

    # -- memory ---------------------------------------------------------------------------------------------
    def offset(self, buf: Buffer) -> str:
        """The element offset of a parameter in the arena (from the byte offset the runtime sets)."""
        return self.idents[("offset", self.kernel.params.index(buf))]

    def load_code(self, buf: Buffer, name: str, idx: str) -> str:
        dt = buf.dtype
        if buf.scope in ("private", "shared"):
            return f"{name}[{idx}]"
        e = f"({self.offset(buf)} + {idx})"
        if dt == "float32":
            return f"bitcast<f32>(fxc_ld{e})"
        if dt == "int32":
            return f"bitcast<i32>(fxc_ld{e})"
        if dt == "int64":
            return f"fxc_ld64({self.offset(buf)} + 2 * {idx})"
        if dt in ("uint8", "bool"):
            v = f"i32(extractBits(fxc_ld({e} >> 2u), u32({e} & 3) * 8u, 8u))"
            return f"({v} != 0)" if dt == "bool" else v
        if dt == "int8":
            return f"extractBits(bitcast<i32>(fxc_ld({e} >> 2u)), u32({e} & 3) * 8u, 8u)"
        if dt == "int16":
            return f"extractBits(bitcast<i32>(fxc_ld({e} >> 1u)), u32({e} & 1) * 16u, 16u)"
        raise LoweringError(f"{self.kernel.name}: WGSL cannot load {dt} ({buf.name})")

    def store_code(self, buf: Buffer, name: str, idx: str, value: str) -> str:
        dt = buf.dtype
        if buf.scope in ("private", "shared"):
            return f"{name}[{idx}] = {value}"
        e = f"({self.offset(buf)} + {idx})"
        if dt == "float32":
            return f"fxc_st({e}, bitcast<u32>({value}))"
        if dt == "int32":
            return f"fxc_st({e}, bitcast<u32>({value}))"
        if dt == "int64":
            return f"fxc_st64({self.offset(buf)} + 2 * {idx}, {value})"
        if dt in ("uint8", "bool", "int8"):
            return f"fxc_st8({e}, {'i32(' + value + ')' if dt == 'bool' else value})"
        if dt == "int16":
            return f"fxc_st16({e}, {value})"
        raise LoweringError(f"{self.kernel.name}: WGSL cannot store {dt} ({buf.name})")

    # -- the shader -----------------------------------------------------------------------------------------
    def kernel_text(self) -> str:
        k = self.kernel
        if k.launch is None:
            raise LoweringError(f"{k.name}: a device kernel needs its launch geometry (lower it with "
                                f"fxc.lowering.schedules.gpu)")
        if k.index_bits != 32:
            raise LoweringError(f"{k.name}: a buffer of this kernel is 2 GiB or larger; WGSL indexes in 32 bits")
        try:
            check_int64_narrowable(k)
        except LoweringError as e:
            raise LoweringError(str(e).replace("GLSL has", "WGSL has")) from None
        body = self.body_text()
        block = (list(k.launch.block) + [1, 1])[:3]
        words = max(1, -(-len(k.params) // 4))
        word = "atomic<u32>" if self.atomic else "u32"
        head = [f"// {k.name}: {k.launch}",
                f"@group(0) @binding(0) var<storage, read_write> fxc_m: array<{word}>;",
                f"@group(0) @binding(1) var<uniform> fxc_o: array<vec4<i32>, {words}>;",
                "@group(0) @binding(2) var<storage, read_write> fxc_err: array<atomic<i32>, 4>;"]
        access = (("atomicLoad(&fxc_m[w])", "atomicStore(&fxc_m[w], v)") if self.atomic else
                  ("fxc_m[w]", "fxc_m[w] = v"))
        head.append(PREAMBLE.format(load=access[0], store=access[1]))
        if self.atomic:
            head.append(SUBWORD_STORES)
        main = [f"  let {self.offset(b)}: i32 = fxc_o[{j // 4}][{j % 4}] >> {SHIFT[b.dtype]}u;"
                for j, b in enumerate(k.params)]
        for b, n in self.private.items():
            if b.dtype in REFUSED:
                raise LoweringError(f"{k.name}: {b.scope} buffer {b.name} of {b.dtype}")
            if b.scope == "shared":
                head.append(f"var<workgroup> {n}: array<{VALUE[b.dtype]}, {max(b.size, 1)}>;")
            else:
                main.append(f"  var {n}: array<{VALUE[b.dtype]}, {max(b.size, 1)}>;")
        if self.fold is not None:      # the last work-groups of a folded grid axis have nothing to do
            xyz, extra = "xyz"[self.fold], "xyz"[len(k.launch.grid)]
            main.append(f"  if (fxc_wid.{xyz} + fxc_wid.{extra} * 65535u >= {k.launch.grid[self.fold]}u) {{ return; }}")
        sig = ("@compute @workgroup_size({}, {}, {})\nfn main(@builtin(workgroup_id) fxc_wid: vec3<u32>, "
               "@builtin(local_invocation_id) fxc_lid: vec3<u32>) {{").format(*block)
        return "\n".join(head + [helper_text(self.used), sig, *main, body, "}", ""])


def helper_text(used: set) -> str:
    need, todo = set(), list(used)
    while todo:
        u = todo.pop()
        if u not in need:
            need.add(u)
            todo += _NEEDS.get(u, ())
    out = [_HELPERS[name] for name in _ORDER if name in need]
    for op in ("truncdiv", "truncmod", "floordiv", "floormod"):
        if op in need:
            out.append(f"fn fxc_{op}(x: i32, y: i32) -> i32 {{ if (y == 0) {{ atomicStore(&fxc_err[0], 1); }} "
                       f"let s = select(y, 1, y == 0 || y == -1); {_DIV[op]} }}")
    return "\n".join(out)


def render_wgsl(kernels: list) -> str:
    """The WebGPU program as JSON text: per kernel its WGSL compute shader and its parameter count."""
    out = {"kernels": {}}
    for k in kernels:
        out["kernels"][k.name] = {"shader": WGSLRenderer(k).kernel_text(), "params": len(k.params)}
    return json.dumps(out)


def needs_fp64(k: Kernel) -> bool:
    """WGSL kernels never compute in float64 (the renderer refuses it with a LoweringError instead)."""
    return False
