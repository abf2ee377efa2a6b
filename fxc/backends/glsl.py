"""The GLSL renderer: device loop-IR Kernels -> GLSL 4.30 compute shaders (the `opengl` target).

Takes Kernels whose launch geometry is set (fxc.lowering.schedules.gpu) and whose expressions are scalar
(fxc.lowering.legalize.scalarize); produces one program text: every kernel a whole compute shader after a
`// fxc_kernel <name>` line (fxc.runtime.opengl.device splits and compiles them).

GLSL has no pointers and no byte offsets: all of a module's tensors live in one storage buffer (the arena,
fxc.runtime.opengl.device), seen by every shader through three views bound to it (`fxc_f32` float, `fxc_i32` int,
`fxc_u32` uint words), and each buffer parameter is an element offset into it, a uniform `o_<name>` set per
launch (-1: an absent optional input). Word 0 of the arena is `fxc_err`: 1 after an integer division by zero,
2 after an int64 value that does not fit 32 bits, 3 after an index out of range (words 1-3: its op + 1, the index,
the dimension's size: the first such index of a call, as fxc.errors.IndexOutOfRangeError reports it).

Types: float32 and the 32-bit ints are native; int8 / uint8 / bool / int16 are bytes and half-words of words
(read with bitfieldExtract, written with atomicAnd + atomicOr so neighbours never race); float64, float16 and
bfloat16 are refused (a LoweringError: the graph runs elsewhere). GLSL has no 64-bit integers (without an
extension): a kernel's index width must be 32 bits, and int64 values are computed in 32 bits only where that is
provably exact: `check_int64_narrowable` (fxc.lowering.int_ranges, shared with the OpenCL renderer's index width)
bounds every int64 expression by interval arithmetic over loop extents
and constants, narrowing the interval across comparisons in selects; int64 loads (and float -> int64 casts)
read values that must fit 32 bits, checked on the device (fxc_err 2: the runtime raises). Anything else is a
LoweringError naming the kernel. Semantics follow the OpenCL renderer: NaN-propagating max/min, float -> int
casts give INT_MIN for NaN and out-of-range values, integer division never traps, pow of a negative base with
an integral exponent as in C.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..lowering.expr import Bin, Cast, CheckIndex, Const, Load, Present, Select, Var, children
from ..lowering.int_ranges import check_int64_narrowable
from ..lowering.loop_ir import (
    BOUND_KINDS,
    Barrier,
    Buffer,
    For,
    Kernel,
    LetStmt,
    Store,
    stmt_exprs,
    walk_stmts,
)
from ..runtime.plan import dispatch_of
from .cstyle import CStyleRenderer

VALUE = {"float32": "float", "int64": "int", "int32": "int", "int16": "int", "int8": "int", "uint8": "int",
         "bool": "bool"}
REFUSED = {"float64": "float64 (not assumed on GL)", "float16": "float16", "bfloat16": "bfloat16"}
SHIFT = {"float32": 2, "int32": 2, "int64": 2, "int16": 1, "int8": 0, "uint8": 0, "bool": 0}   # bytes -> units
I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1
INT_MIN = "(-2147483647 - 1)"


def _fmaxmin(fn):
    """max/min that propagate NaN (as PyTorch and the other backends). A select by mix(x, y, bool), not `c ? x : y`:
    ANGLE turns a ternary into an if/else, and SwiftShader then never finishes compiling (the page loses its WebGL
    context) a loop whose body holds a chain of them, as an unrolled max reduction has (amax over 4 or 8 elements)."""
    return lambda r, dt, a, b: f"mix({fn}({a}, {b}), {a} + {b}, isnan({a}) || isnan({b}))"


def _helper(name):
    def code(r, dt, *args):
        r.used.add(name)
        return f"fxc_{name}({', '.join(args)})"
    return code


def _int_div(op):
    def code(r, dt, a, b):
        r.used.add(op)
        return f"fxc_{op}({a}, {b})"
    return code


CODE_FOR_OP = {
    "max.f": _fmaxmin("max"), "min.f": _fmaxmin("min"), "max.i": "max({0}, {1})", "min.i": "min({0}, {1})",
    "max.b": "({0} || {1})", "min.b": "({0} && {1})",
    "pow.f": _helper("pow"), "atan2.f": _helper("atan2"), "hypot.f": _helper("hypot"),
    "copysign.f": "uintBitsToFloat((floatBitsToUint({0}) & 0x7FFFFFFFu) | (floatBitsToUint({1}) & 0x80000000u))",
    "fma.f": "fma({0}, {1}, {2})",
    "check_index": "fxc_check_index({0}, {1}, {2}, {3})",     # records the first bad index of a call (fxc_err 3)
    "truncmod.f": _helper("fmod"), "floordiv.f": "floor({0} / {1})", "truncdiv.f": "trunc({0} / {1})",
    "floormod.f": _helper("floormod_f"),
    "div.i": _int_div("truncdiv"), "truncdiv.i": _int_div("truncdiv"), "floordiv.i": _int_div("floordiv"),
    "truncmod.i": _int_div("truncmod"), "floormod.i": _int_div("floormod"),
    "and.b": "({0} && {1})", "or.b": "({0} || {1})", "xor.b": "({0} != {1})",
    "neg": "(-{0})", "not.b": "(!{0})", "not.i": "(~{0})", "abs.f": "abs({0})", "abs.i": "abs({0})",
    "isnan.f": "isnan({0})", "isinf.f": "isinf({0})", "signbit.f": "((floatBitsToUint({0}) >> 31) != 0u)",
    "isnan.i": "false", "isinf.i": "false", "signbit.i": "({0} < 0)",
    "sigmoid.f": "(1.0 / (1.0 + exp(-{0})))", "round.f": "roundEven({0})", "log10.f": "(log({0}) * 0.4342944819)",
    "tanh.f": _helper("tanh"), "erf.f": _helper("erf"), "expm1.f": _helper("expm1"), "log1p.f": _helper("log1p"),
    "asin.f": "atan({0}, sqrt((1.0 - {0}) * (1.0 + {0})))",      # GL's asin / acos may be 1e-4 off (Mesa's are)
    "acos.f": "atan(sqrt((1.0 - {0}) * (1.0 + {0})), {0})", "nextafter.f": _helper("nextafter"),
    **{f"{fn}.f": fn + "({0})" for fn in ("exp", "log", "sqrt", "sin", "cos", "tan", "floor", "ceil", "trunc",
                                          "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                          "log2", "exp2")},
}

# integer division that never traps: division by zero sets fxc_err, MIN / -1 wraps (as on the CPU)
_DIV = {
    "truncdiv": "return (y == -1) ? -x : x / s;",
    "truncmod": "return (y == -1) ? 0 : x % s;",     # GLSL's % on negatives is undefined: computed from /
    "floordiv": "int q = x / s; int m = x - q * s; if (m != 0 && ((m ^ s) < 0)) q -= 1; return (y == -1) ? -x : q;",
    "floormod": "int m = x - (x / s) * s; if (m != 0 && ((m ^ s) < 0)) m += s; return (y == -1) ? 0 : m;",
}
_DIV["truncmod"] = "return (y == -1) ? 0 : x - (x / s) * s;"

_HELPERS = {
    "pow": """float fxc_pow(float x, float y) {
  if (y == 0.0) return 1.0;
  if (x == 0.0) return y < 0.0 ? FXC_INF * ((fract(y * 0.5) == 0.5 && signbit_(x)) ? -1.0 : 1.0)
                               : ((fract(y * 0.5) == 0.5 && signbit_(x)) ? -0.0 : 0.0);
  float r = exp2(y * log2(abs(x)));
  if (x < 0.0) { if (trunc(y) != y) return uintBitsToFloat(0x7FC00000u); if (fract(y * 0.5) != 0.0) r = -r; }
  return r;
}""",
    "atan2": "float fxc_atan2(float y, float x) { return (x == 0.0 && y == 0.0) ? "
             "(signbit_(x) ? (signbit_(y) ? -3.14159265358979 : 3.14159265358979) : y) : atan(y, x); }",
    "hypot": "float fxc_hypot(float x, float y) { float a = abs(x), b = abs(y); float m = max(a, b); "
             "if (isinf(a) || isinf(b)) return FXC_INF; if (m == 0.0) return 0.0; "
             "float p = a / m, q = b / m; return m * sqrt(p * p + q * q); }",
    "fmod": "float fxc_fmod(float x, float y) { if (y == 0.0 || isinf(x)) return uintBitsToFloat(0x7FC00000u); "
            "if (isinf(y)) return x; float r = abs(x) - abs(y) * trunc(abs(x) / abs(y)); "
            "if (r < 0.0) r += abs(y); if (r >= abs(y)) r -= abs(y); return x < 0.0 ? -r : r; }",
    "floormod_f": "float fxc_floormod_f(float x, float y) { float m = fxc_fmod(x, y); "
                  "return (m != 0.0 && ((m < 0.0) != (y < 0.0))) ? m + y : m; }",
    "tanh": "float fxc_tanh(float x) { if (abs(x) < 0.55) { float x2 = x * x; return x + x * x2 * (-0.333333333 + "
            "x2 * (0.133333333 + x2 * (-0.0539682540 + x2 * (0.0218694885 + x2 * -0.00886323552)))); } "
            "float e = exp(-2.0 * abs(x)); float t = (1.0 - e) / (1.0 + e); return x < 0.0 ? -t : t; }",
    # erf: W. J. Cody's rational approximations, float32 accuracy (the abs error of A&S 7.1.26 is too coarse
    # for erf near 0 in relative terms)
    "erf": """float fxc_erf(float x) {
  float a = abs(x);
  if (a < 0.5) { float t = x * x;
    return x * (1.1283791671 + t * (-0.3761263890 + t * (0.1128379167 + t * (-0.0268661706 + t * 0.0052239776)))); }
  return sign(x) * (1.0 - fxc_erfc_pos(a));
}""",
    "erfc_pos": """float fxc_erfc_pos(float a) {
  float t = 1.0 / (1.0 + 0.5 * a);
  float y = t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
      + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return y;
}""",
    "nextafter": "float fxc_nextafter(float x, float y) { if (isnan(x) || isnan(y)) return x + y; "
                 "if (x == y) return y; if (x == 0.0) return uintBitsToFloat(1u) * (y > 0.0 ? 1.0 : -1.0); "
                 "uint b = floatBitsToUint(x); return uintBitsToFloat(((x < y) == (x > 0.0)) ? b + 1u : b - 1u); }",
    "expm1": "float fxc_expm1(float x) { float u = exp(x); if (u == 1.0) return x; float m = u - 1.0; "
             "if (m == -1.0) return -1.0; if (isinf(u)) return u; return m * x / log(u); }",
    "log1p": "float fxc_log1p(float x) { float u = 1.0 + x; if (u == 1.0) return x; if (isinf(u)) return u; "
             "return log(u) * x / (u - 1.0); }",
}
_NEEDS = {"erf": {"erfc_pos"}, "floormod_f": {"fmod"}}

PREAMBLE = """\
#define FXC_INF uintBitsToFloat(0x7F800000u)
bool signbit_(float x) { return (floatBitsToUint(x) >> 31) != 0u; }
int fxc_ld64(int w) { int lo = fxc_i32[w]; if (fxc_i32[w + 1] != (lo >> 31)) fxc_i32[0] = 2; return lo; }
void fxc_st64(int w, int v) { fxc_i32[w] = v; fxc_i32[w + 1] = v >> 31; }
int fxc_narrow(float x) { if (!(abs(x) < 2147483648.0)) fxc_i32[0] = 2; return int(x); }
int fxc_check_index(int i, int size, int wrap, int op) { int j = (wrap != 0 && i < 0) ? i + size : i;
  if (j >= 0 && j < size) return j;
  if (atomicCompSwap(fxc_i32[1], 0, op + 1) == 0) { fxc_i32[2] = i; fxc_i32[3] = size; }
  atomicCompSwap(fxc_i32[0], 0, 3);
  return 0; }
void fxc_st8(int e, int v) { int w = e >> 2; int s = (e & 3) * 8;
  atomicAnd(fxc_u32[w], ~(0xFFu << s)); atomicOr(fxc_u32[w], (uint(v) & 0xFFu) << s); }
void fxc_st16(int e, int v) { int w = e >> 1; int s = (e & 1) * 16;
  atomicAnd(fxc_u32[w], ~(0xFFFFu << s)); atomicOr(fxc_u32[w], (uint(v) & 0xFFFFu) << s); }
"""

def int32_const(v: int, dt: str, int_min: str, kernel: str, language: str) -> str:
    """An integer constant in a language whose ints are 32 bits (GLSL, WGSL): int_min spells -2**31 there; an int64
    beyond 32 bits is a reduction's identity (check_int64_narrowable), saturated; any other is a LoweringError."""
    if dt in ("int64", "int32") and v == I32_MIN:
        return int_min
    if dt == "int64" and not I32_MIN <= v <= I32_MAX:
        return int_min if v < 0 else str(I32_MAX)
    if not I32_MIN <= v <= I32_MAX:
        raise LoweringError(f"{kernel}: integer constant {v} needs 64 bits, which {language} lacks")
    return str(v)


class GLSLRenderer(CStyleRenderer):
    has_local = True
    bound_index = {"grid": "gl_WorkGroupID", "thread": "gl_LocalInvocationID"}
    types = VALUE
    memory_types = VALUE
    code_for_op = CODE_FOR_OP

    def __init__(self, kernel: Kernel):
        for b in kernel.params:
            if b.dtype in REFUSED:
                raise LoweringError(f"{kernel.name}: buffer {b.name} is {REFUSED[b.dtype]}, which the GLSL "
                                    f"renderer does not compute in; the graph runs on another target")
        super().__init__(kernel)
        self.dims, self.fold = dispatch_of(kernel.launch.grid) if kernel.launch else ((1, 1, 1), None)

    # -- names, loops ------------------------------------------------------------------------------------
    def offset(self, buf: Buffer) -> str:
        """The element offset of a parameter in the arena (from the byte offset the runtime sets, `fxc_b<j>`)."""
        return f"o{self.kernel.params.index(buf)}"

    def loop(self, s: For):
        for st in walk_stmts(s.body):
            if isinstance(st, Store):
                self.invalidate(st.buf)
            elif isinstance(st, Barrier):
                self.invalidate_shared()
        v = s.var.name
        if s.kind in BOUND_KINDS:
            xyz = "xyz"[s.axis]
            if s.kind == "grid" and self.fold == s.axis:
                idx = f"int(gl_WorkGroupID.{xyz} + gl_WorkGroupID.{'xyz'[len(self.kernel.launch.grid)]} * 65535u)"
            else:
                idx = f"int({self.bound_index[s.kind]}.{xyz})"
            self.emit("{")
            self.depth += 1
            self.emit(f"const int {v} = {idx};")
            self.depth -= 1
            self.block(s.body, ((s.var, v),))
            self.emit("}")
            return
        end = self.expr(s.extent) if not isinstance(s.extent, int) else str(s.extent)
        self.emit(f"for (int {v} = {s.start}; {v} < {end}; ++{v}) {{")
        self.block(s.body, ((s.var, v),))
        self.emit("}")

    # -- memory ------------------------------------------------------------------------------------------
    def elem(self, buf: Buffer, idx: str) -> str:
        return idx if buf.scope in ("private", "shared") else f"({self.offset(buf)} + {idx})"

    def load_code(self, buf: Buffer, name: str, idx: str) -> str:
        dt = buf.dtype
        if buf.scope in ("private", "shared"):
            return f"{name}[{idx}]"
        e = self.elem(buf, idx)
        if dt == "float32":
            return f"fxc_f32[{e}]"
        if dt == "int32":
            return f"fxc_i32[{e}]"
        if dt == "int64":
            return f"fxc_ld64({self.offset(buf)} + 2 * {idx})"
        if dt in ("uint8", "bool"):
            v = f"int(bitfieldExtract(fxc_u32[{e} >> 2], ({e} & 3) * 8, 8))"
            return f"({v} != 0)" if dt == "bool" else v
        if dt == "int8":
            return f"bitfieldExtract(fxc_i32[{e} >> 2], ({e} & 3) * 8, 8)"
        if dt == "int16":
            return f"bitfieldExtract(fxc_i32[{e} >> 1], ({e} & 1) * 16, 16)"
        raise LoweringError(f"{self.kernel.name}: GLSL cannot load {dt} ({buf.name})")

    def store_code(self, buf: Buffer, name: str, idx: str, value: str) -> str:
        dt = buf.dtype
        if buf.scope in ("private", "shared"):
            return f"{name}[{idx}] = {value}"
        e = self.elem(buf, idx)
        if dt == "float32":
            return f"fxc_f32[{e}] = {value}"
        if dt == "int32":
            return f"fxc_i32[{e}] = {value}"
        if dt == "int64":
            return f"fxc_st64({self.offset(buf)} + 2 * {idx}, {value})"
        if dt in ("uint8", "bool", "int8"):
            return f"fxc_st8({e}, {'int(' + value + ')' if dt == 'bool' else value})"
        if dt == "int16":
            return f"fxc_st16({e}, {value})"
        raise LoweringError(f"{self.kernel.name}: GLSL cannot store {dt} ({buf.name})")

    def compute(self, e):
        if isinstance(e, Present):
            return f"({self.offset(e.args[0])} >= 0)"
        if e.dtype in REFUSED:
            raise LoweringError(f"{self.kernel.name}: {REFUSED[e.dtype]} arithmetic; GLSL computes float32")
        return super().compute(e)

    # -- values ------------------------------------------------------------------------------------------
    def int_const(self, v: int, dt: str) -> str:
        return int32_const(v, dt, INT_MIN, self.kernel.name, "GLSL")

    def float_const(self, v: float, dt: str) -> str:
        import math
        if math.isnan(v):
            return "uintBitsToFloat(0x7FC00000u)"
        if math.isinf(v):
            return "uintBitsToFloat(0xFF800000u)" if v < 0 else "uintBitsToFloat(0x7F800000u)"
        import struct
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        return f"uintBitsToFloat({bits:#010x}u)"      # exact, whatever the compiler's decimal parsing

    def barrier(self) -> str:
        return "memoryBarrierShared(); barrier();"

    def cast_code(self, fr: str, to: str, x: str) -> str:
        if fr == to:
            return x
        if to == "bool":
            return f"({x} != {'0.0' if fr == 'float32' else '0'})" if fr != "bool" else x
        if to == "float32":
            return f"float({x})"
        if fr == "bool":
            return f"int({x})"
        if fr == "float32":
            if to == "int64":
                return f"fxc_narrow({x})"
            w = f"(abs({x}) < 2147483648.0 ? int({x}) : {INT_MIN})"        # x86: NaN / out of range -> MIN
            return w if to == "int32" else self.cast_code("int32", to, w)
        if to == "uint8":
            return f"({x} & 255)"
        if to == "int8":
            return f"bitfieldExtract({x}, 0, 8)"
        if to == "int16":
            return f"bitfieldExtract({x}, 0, 16)"
        return x            # int32 <-> int64 (narrowed: the same 32-bit value), and widening of narrower ints

    # -- the shader ----------------------------------------------------------------------------------------
    def kernel_text(self) -> str:
        k = self.kernel
        if k.launch is None:
            raise LoweringError(f"{k.name}: a device kernel needs its launch geometry (lower it with "
                                f"fxc.lowering.schedules.gpu)")
        if k.index_bits != 32:
            raise LoweringError(f"{k.name}: a buffer of this kernel is 2 GiB or larger; GLSL indexes in 32 bits")
        check_int64_narrowable(k)
        body = self.body_text()
        block = (list(k.launch.block) + [1, 1])[:3]
        head = ["#version 430", f"// {k.name}: {k.launch}",
                "layout(local_size_x = {}, local_size_y = {}, local_size_z = {}) in;".format(*block),
                "layout(std430, binding = 0) buffer FxcF32 { float fxc_f32[]; };",
                "layout(std430, binding = 1) buffer FxcI32 { int fxc_i32[]; };",
                "layout(std430, binding = 2) buffer FxcU32 { uint fxc_u32[]; };"]
        head += [f"uniform int fxc_b{j};" for j in range(len(k.params))]
        main = [f"  int o{j} = fxc_b{j} >> {SHIFT[b.dtype]};" for j, b in enumerate(k.params)]
        for b, n in self.private.items():
            if b.dtype in REFUSED:
                raise LoweringError(f"{k.name}: {b.scope} buffer {b.name} of {b.dtype}")
            decl = f"{VALUE[b.dtype]} {n}[{max(b.size, 1)}];"
            (head if b.scope == "shared" else main).append(("shared " if b.scope == "shared" else "  ") + decl)
        if self.fold is not None:      # the last work-groups of a folded grid axis have nothing to do
            xyz, extra = "xyz"[self.fold], "xyz"[len(k.launch.grid)]
            main.append(f"  if (gl_WorkGroupID.{xyz} + gl_WorkGroupID.{extra} * 65535u >= "
                        f"{k.launch.grid[self.fold]}u) return;")
        return "\n".join(head + [PREAMBLE, helper_text(self.used), "void main() {", *main, body, "}", ""])


def helper_text(used: set) -> str:
    need, todo = set(), list(used)
    while todo:
        u = todo.pop()
        if u not in need:
            need.add(u)
            todo += _NEEDS.get(u, ())
    out = []
    for name in ("erfc_pos", "fmod", "erf", "floormod_f", "pow", "atan2", "hypot", "tanh", "expm1", "log1p",
                 "nextafter"):
        if name in need:
            out.append(_HELPERS[name])
    for op in ("truncdiv", "truncmod", "floordiv", "floormod"):
        if op in need:
            out.append(f"int fxc_{op}(int x, int y) {{ if (y == 0) fxc_i32[0] = 1; "
                       f"int s = (y == 0 || y == -1) ? 1 : y; {_DIV[op]} }}")
    return "\n".join(out)


def render_glsl(kernels: list) -> str:
    """One program text: each kernel's compute shader after a `// fxc_kernel <name>` line."""
    return "".join(f"// fxc_kernel {k.name}\n" + GLSLRenderer(k).kernel_text() for k in kernels)


def needs_fp64(k: Kernel) -> bool:
    """GLSL kernels never compute in float64 (the renderer refuses it with a LoweringError instead)."""
    return False


# -- WebGL 2: GLSL ES 3.00 fragment shaders --------------------------------------------------------------------
ES_HEAD = """#version 300 es
precision highp float;
precision highp int;
precision highp sampler2D;
precision highp isampler2D;
#define FXC_INF uintBitsToFloat(0x7F800000u)
bool signbit_(float x) { return (floatBitsToUint(x) >> 31) != 0u; }
"""
_FLOAT_TEX = ("float32",)
# GLSL ES 3.00 states no precision for sin/cos/tan (SwiftShader's are 2e-4 off for |x| of a few units): Cephes's
# sinf/cosf instead, 1-2 ulp for |x| < 8192: x reduced by multiples of pi/4 (pi/4 in three parts), a polynomial of
# the octant; tan = sin / cos
ES_TRIG = """float fxc_trig(float x, bool c) {
  float ax = abs(x), sign = (!c && x < 0.0) ? -1.0 : 1.0;
  int j = int(ax * 1.27323954473516);
  float y = float(j);
  if ((j & 1) != 0) { j += 1; y += 1.0; }
  j &= 7;
  if (j > 3) { sign = -sign; j -= 4; }
  if (c && j > 1) sign = -sign;
  float r = ((ax - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
  float z = r * r;
  bool cosPoly = (j == 1 || j == 2) != c;
  float v = cosPoly ? ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z
                      - 0.5 * z + 1.0
                    : ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
  return isinf(x) ? uintBitsToFloat(0x7FC00000u) : sign * v;
}
float fxc_sin(float x) { return fxc_trig(x, false); }
float fxc_cos(float x) { return fxc_trig(x, true); }
float fxc_tan(float x) { return fxc_trig(x, false) / fxc_trig(x, true); }
"""


def select_code(dtype: str, c: str, a: str, b: str) -> str:
    """`c ? a : b` without a ternary, exact for every value (NaN, inf, -0.0, any int): SwiftShader's shader compiler
    hangs on `?:` chains in (unrolled) loops, which ANGLE turns into if/else with temporaries (a conv2d_packed draw
    never returned and the context was lost: docs/web.md). A float is `mix(b, a, c)` with a bool `c` (a select, not a
    blend: mix with a float weight would not be exact), an int a mask (ESSL 3.00 has no int mix), a bool by floats."""
    if dtype in _FLOAT_TEX:
        return f"mix({b}, {a}, {c})"
    if dtype == "bool":
        return f"(mix(float({b}), float({a}), {c}) != 0.0)"
    return f"(({a} & -int({c})) | ({b} & (int({c}) - 1)))"


class WebGLRenderer(GLSLRenderer):
    """A one-work-item-per-output kernel (fxc.lowering.schedules.gpu with a WebGL target's Caps: work-groups of
    one, no shared memory) -> a fragment shader: the fragment at (x, y) of the output texture is the work-item
    y * width + x. Every tensor is a 2-D R32F (float32) or R32I (every integer type, int64 narrowed to 32 bits
    by the host) texture `width` texels wide; a kernel stores only into its output, at its own index. What a
    fragment shader cannot do is a LoweringError: stores elsewhere (scatter, hand-written loop IR), shared
    memory, integer division by a divisor that may be 0 (no error flag), float -> int64 casts."""

    has_local = False

    def __init__(self, kernel: Kernel, width: int):
        super().__init__(kernel)
        self.width = width
        self.frag: set = set()          # variables equal to the fragment's work-item index
        self.zero: set = set()          # the thread variable (work-groups of one)
        self.checks: list = []          # [param, size, wrap, op]: indices the host checks (checked_index)
        self.trig = False               # the shader calls fxc_sin / fxc_cos / fxc_tan (ES_TRIG)
        self.outputs = [b for b in kernel.params if any(isinstance(s, Store) and s.buf is b
                                                        for s in walk_stmts(kernel.body))]
        if len(self.outputs) != 1:
            raise LoweringError(f"{kernel.name}: a WebGL kernel writes one tensor, this one {len(self.outputs)}")

    def emit(self, line: str):
        s = line.lstrip()           # GLSL ES 3.00: a const needs a constant initializer
        super().emit(s[len("const "):] if s.startswith("const ") else s)

    def loop(self, s: For):
        if s.kind == "grid":
            if s.axis != 0 or len(self.kernel.launch.grid) != 1:
                raise LoweringError(f"{self.kernel.name}: WebGL runs one-dimensional grids of work-items")
            self.frag.add(s.var)
            self.block(s.body, ((s.var, "fxc_i"),))
            return
        if s.kind == "thread":
            if s.extent != 1:
                raise LoweringError(f"{self.kernel.name}: WebGL has no work-groups (a thread loop of {s.extent})")
            self.zero.add(s.var)
            self.block(s.body, ((s.var, "0"),))
            return
        self.hoist(s)
        super().loop(s)

    def hoist(self, s: For):
        """Compute the loop's invariant arithmetic once, before it (the index math of a convolution's taps: its
        divisions and remainders by the output's extents). SwiftShader's shader JIT (Subzero) moves nothing out of
        a loop, and integer division is its slowest instruction: without this a fragment of a 1x1 convolution spends
        most of its time on divisions. Hoisted: expressions free of the loop's own variables and of loads (pure, and
        total here: integer division has a nonzero constant divisor, see compute), the largest such of each."""
        inner = {s.var} | {st.var for st in walk_stmts(s.body) if isinstance(st, (For, LetStmt))}
        free: dict = {}

        def invariant(e) -> bool:
            got = free.get(e)
            if got is None:
                got = not isinstance(e, (Load, Present, CheckIndex)) and e not in inner \
                    and all(invariant(c) for c in children(e))
                free[e] = got
            return got

        def visit(e):
            if self.lookup(e) is not None or isinstance(e, (Const, Var)):
                return
            if invariant(e):
                self.expr(e)
            else:
                for c in children(e):
                    visit(c)
        for st in walk_stmts(s.body):
            for e in stmt_exprs(st):
                visit(e)
        for st in walk_stmts(s.body):       # inner loops' extents are ints; a store's buffer is never hoisted
            if isinstance(st, For) and not isinstance(st.extent, int):
                visit(st.extent)

    def stmt(self, s):
        if isinstance(s, LetStmt) and self._is_frag(s.value):
            self.frag.add(s.var)
        super().stmt(s)

    def _is_frag(self, e) -> bool:
        """e is the work-item index: g, g * 1, or either plus the thread variable."""
        if e in self.frag:
            return True
        if isinstance(e, Bin) and e.args[0] == "mul" and isinstance(e.args[2], Const) and e.args[2].value == 1:
            return self._is_frag(e.args[1])
        if isinstance(e, Bin) and e.args[0] == "add":
            a, b = e.args[1], e.args[2]
            return (self._is_frag(a) and b in self.zero) or (self._is_frag(b) and a in self.zero)
        return False

    def load_code(self, buf: Buffer, name: str, idx: str) -> str:
        if buf.scope in ("private", "shared"):
            return f"{name}[{idx}]"
        j = self.kernel.params.index(buf)
        if buf is self.outputs[0]:
            raise LoweringError(f"{self.kernel.name}: reads its own output {buf.name}, which a fragment cannot")
        v = f"texelFetch(fxc_t{j}, fxc_at({idx}), 0).r"
        return f"({v} != 0)" if buf.dtype == "bool" else v

    def store(self, s: Store):
        if s.buf.scope != "global":
            return super().store(s)
        if s.index not in self.frag:
            raise LoweringError(f"{self.kernel.name}: stores {s.buf.name} at another index than its own work-item's "
                                f"(a scatter), which a WebGL fragment cannot")
        v = self.expr(s.value)
        self.emit(f"fxc_out = {'int(' + v + ')' if s.buf.dtype == 'bool' else v};")

    def compute(self, e):
        if isinstance(e, Present):
            raise LoweringError(f"{self.kernel.name}: an optional input; WebGL binds every input")
        if isinstance(e, CheckIndex):
            return self.checked_index(e)
        if isinstance(e, Select) and e.dtype not in REFUSED:       # (float64: GLSLRenderer refuses it)
            return select_code(e.dtype, *self.operands(e, *e.args))
        if isinstance(e, Bin) and e.args[0] in ("div", "truncdiv", "floordiv", "truncmod", "floormod") \
                and e.args[1].dtype not in _FLOAT_TEX and e.dtype != "bool":
            d = e.args[2]
            if not (isinstance(d, Const) and int(d.value) not in (0, -1)):
                raise LoweringError(f"{self.kernel.name}: integer {e.args[0]} by a divisor that may be 0; WebGL "
                                    f"has no way to report it")
        return super().compute(e)

    def checked_index(self, e: CheckIndex) -> str:
        """An index checked as eager checks it. A fragment cannot report a bad one, so the host checks it: only an
        index read straight from a parameter (an input or a constant of the model: the runtime checks every value
        of that tensor before the call, `checks` in the program) is rendered, clamped into the dimension (memory
        safety only: the host has refused a call with an index out of range); any other is a LoweringError."""
        i, size, wrap, op = e.args
        src = i.args[1] if isinstance(i, Cast) and i.args[1].dtype not in _FLOAT_TEX else i
        if not (isinstance(src, Load) and src.args[0] in self.kernel.params and src.args[0].dtype not in _FLOAT_TEX):
            raise LoweringError(f"{self.kernel.name}: an index checked as eager checks it, computed in the kernel; a "
                                f"WebGL fragment has no way to report one out of range")
        check = [self.kernel.params.index(src.args[0]), int(size), bool(wrap), int(op)]
        if check not in self.checks:
            self.checks.append(check)
        x = self.expr(i)
        v = f"({x} < 0 ? {x} + {size} : {x})" if wrap else x
        return f"clamp({v}, 0, {max(int(size) - 1, 0)})"

    def cast_code(self, fr: str, to: str, x: str) -> str:
        if fr == "float32" and to == "int64":
            raise LoweringError(f"{self.kernel.name}: a float -> int64 cast may leave 32 bits; WebGL cannot check it")
        if to == "int8" and fr != "bool":
            return f"(({self.cast_code(fr, 'int32', x)} << 24) >> 24)"
        if to == "int16" and fr != "bool":
            return f"(({self.cast_code(fr, 'int32', x)} << 16) >> 16)"
        return super().cast_code(fr, to, x)

    def at(self) -> str:
        """The texel of element e (e >= 0): a shift and a mask when the width is a power of two."""
        w = self.width
        if w & (w - 1):
            return "ivec2(e % FXC_W, e / FXC_W)"
        return f"ivec2(e & {w - 1}, e >> {w.bit_length() - 1})"

    def op_code(self, op: str, dtype: str, *args: str) -> str:
        if op == "fma":
            return f"({args[0]} * {args[1]} + {args[2]})"
        if op in ("sin", "cos", "tan") and dtype == "float32":
            self.trig = True
            return f"fxc_{op}({args[0]})"
        return super().op_code(op, dtype, *args)

    def check_kernel(self) -> None:
        """What WebGL cannot run: work-groups of more than one work-item, 64-bit indices, int64 values not
        provably narrowable to 32 bits (a LoweringError naming the kernel)."""
        k = self.kernel
        if k.launch is None or any(b != 1 for b in k.launch.block):
            raise LoweringError(f"{k.name}: WebGL runs work-groups of one work-item")
        if k.index_bits != 32:
            raise LoweringError(f"{k.name}: a buffer of this kernel is 2 GiB or larger; WebGL indexes in 32 bits")
        check_int64_narrowable(k)

    def kernel_text(self) -> str:
        k = self.kernel
        self.check_kernel()
        body = self.body_text()
        out = self.outputs[0]
        head = [ES_HEAD, f"// {k.name}: {k.launch}", f"#define FXC_W {self.width}",
                f"ivec2 fxc_at(int e) {{ return {self.at()}; }}",
                f"layout(location = 0) out {'highp float' if out.dtype in _FLOAT_TEX else 'highp int'} fxc_out;"]
        head += [f"uniform {'sampler2D' if b.dtype in _FLOAT_TEX else 'isampler2D'} fxc_t{j};"
                 for j, b in enumerate(k.params) if b is not out]
        main = [f"  {VALUE[b.dtype]} {n}[{max(b.size, 1)}];" for b, n in self.private.items()]
        helpers = helper_text({u for u in self.used if u in _HELPERS}) + (ES_TRIG if self.trig else "")
        divs = [f"int fxc_{op}(int x, int y) {{ int s = y; {_DIV[op]} }}" for op in _DIV if op in self.used]
        return "\n".join(head + [helpers, *divs, "void main() {",
                                 "  int fxc_i = int(gl_FragCoord.y) * FXC_W + int(gl_FragCoord.x);",
                                 f"  if (fxc_i >= {out.size}) {{ discard; }}", *main, body, "}", ""])


PART_ROWS = 32      # the rows a render-target part's draw spans at least, where it can (see part_tiles)


def part_tiles(split: int, block: int, width: int) -> int:
    """Into how many tiles a render-target part of `split` texels (whole rows of `width`: R rows) is drawn: T tiles
    of `width / T` texels by R rows, one under another, so the draw spans R x T rows. SwiftShader shares a draw
    among its threads by rows: BERT's 128x1024 @ 1024x256 matmul, a part of 2 rows of 1024 texels, took 36-41 ms a
    draw; drawn 64 texels wide (32 rows), 19-22 ms (benchmarks.webgl_matmul_micro --width). 0: drawn as it is
    (parts in runs of `block`, parts not whole rows, or already PART_ROWS rows)."""
    if block != split or split % width or split // width >= PART_ROWS:
        return 0
    rows, tiles = split // width, 1
    while rows * tiles < PART_ROWS and width // (2 * tiles) >= 64:
        tiles *= 2
    return tiles if tiles > 1 else 0


def render_webgl(kernels: list, width: int, offsets=frozenset(), elements: int = 0, targets: int = 1) -> str:
    """The WebGL program as JSON text: the texture width (at most `width`: the narrowest power of two >= 64 that holds
    every tensor in 2048 rows, WebGL 2's least MAX_TEXTURE_SIZE), the elements a texel (`lanes`: RGBA textures, four
    outputs a fragment, fxc.backends.webgl.lanes), and per kernel its fragment shader, its parameters' dtypes and
    sizes, and which parameter it writes. `offsets`: the names of the kernels that run as row launches (a uniform
    texel offset per parameter, fxc/driver/rows.py); `elements`: the largest tensor at the symbol's largest size;
    `targets`: the render targets a draw may write (Caps.render_targets): a kernel that gains from writing several
    texels a fragment (fxc.backends.webgl.draw_buffers) has "targets" and "split" (texels a part) in its record."""
    import json

    from .webgl.draw_buffers import WebGLTargetsRenderer, split_targets
    from .webgl.lanes import TEXEL_WIDTH, WebGLLanesRenderer
    texels = max([-(-b.size // TEXEL_WIDTH) for k in kernels for b in k.params] + [-(-elements // TEXEL_WIDTH), 1])
    width = min(width, max(64, 1 << (-(-texels // 2048) - 1).bit_length()))    # as narrow as fits 2048 rows:
    out = {"width": width, "lanes": TEXEL_WIDTH, "kernels": {}}       # a draw of few fragments still spans whole quads
    for k in kernels:
        split = split_targets(k, targets) if k.name not in offsets else None
        r = WebGLTargetsRenderer(split[0], width, split[1], split[4]) if split else None
        if r is None or r.mode != "lanes":
            r, split = WebGLLanesRenderer(k, width, k.name in offsets), None
        tiles = part_tiles(split[2], split[3], width) if split else 0
        if tiles:
            r.tiles = (tiles, split[2] // width)
        text = r.kernel_text()
        out["kernels"][k.name] = {"shader": text, "output": k.params.index(r.outputs[0]),
                                  "params": [[b.dtype, b.size] for b in k.params], "checks": r.checks}
        if split:
            out["kernels"][k.name].update(targets=split[1], split=split[2])
            if tiles:
                out["kernels"][k.name]["tiles"] = tiles
            if split[3] != split[2]:        # parts in runs of `block` texels (e.g. pixels within a channel block)
                out["kernels"][k.name]["block"] = split[3]
    return json.dumps(out)
