"""The GLSL renderer: device loop-IR Kernels -> GLSL 4.30 compute shaders (the `opengl` target).

Takes Kernels whose launch geometry is set (fxc.lowering.schedules.gpu) and whose expressions are scalar
(fxc.lowering.legalize.scalarize); produces one program text: every kernel a whole compute shader after a
`// fxc_kernel <name>` line (fxc.runtime.opengl.device splits and compiles them). The `webgl` target's fragment
renderers (fxc.backends.webgl) build on GLSLRenderer.

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

import math
import struct

from ..errors import LoweringError
from ..lowering.int_ranges import check_int64_narrowable
from ..lowering.loop_ir import (
    BOUND_KINDS,
    Barrier,
    Buffer,
    For,
    Kernel,
    Store,
    walk_stmts,
)
from ..runtime.launch import dispatch_of
from ..symbolic.expr import Bin, Const, Present
from .cstyle import CStyleRenderer, int32_const

VALUE = {"float32": "float", "int64": "int", "int32": "int", "int16": "int", "int8": "int", "uint8": "int",
         "bool": "bool"}
REFUSED = {"float64": "float64 (not assumed on GL)", "float16": "float16", "bfloat16": "bfloat16"}
SHIFT = {"float32": 2, "int32": 2, "int64": 2, "int16": 1, "int8": 0, "uint8": 0, "bool": 0}   # bytes -> units
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
INT_DIV = {
    "truncdiv": "return (y == -1) ? -x : x / s;",
    "truncmod": "return (y == -1) ? 0 : x % s;",     # GLSL's % on negatives is undefined: computed from /
    "floordiv": "int q = x / s; int m = x - q * s; if (m != 0 && ((m ^ s) < 0)) q -= 1; return (y == -1) ? -x : q;",
    "floormod": "int m = x - (x / s) * s; if (m != 0 && ((m ^ s) < 0)) m += s; return (y == -1) ? 0 : m;",
}
INT_DIV["truncmod"] = "return (y == -1) ? 0 : x - (x / s) * s;"

HELPERS = {
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

class GLSLRenderer(CStyleRenderer):
    has_local = True
    bound_index = {"grid": "gl_WorkGroupID", "thread": "gl_LocalInvocationID"}
    types = VALUE
    memory_types = VALUE
    code_for_op = CODE_FOR_OP
    exact_qualifier = "precise "        # GLSL may fuse a * b and a later + c unless the value is precise (GLSL 4.00)

    def __init__(self, kernel: Kernel):
        for b in kernel.params:
            if b.dtype in REFUSED:
                raise LoweringError(f"{kernel.name}: buffer {b.name} is {REFUSED[b.dtype]}, which the GLSL "
                                    f"renderer does not compute in; the graph runs on another target")
        super().__init__(kernel)
        self.dims, self.fold = dispatch_of(kernel.launch.grid) if kernel.launch else ((1, 1, 1), None)

    # -- names, loops ------------------------------------------------------------------------------------
    def kernel_names(self) -> list:
        return [(("offset", j), f"o{j}") for j in range(len(self.kernel.params))]

    def offset(self, buf: Buffer) -> str:
        """The element offset of a parameter in the arena (from the byte offset the runtime sets, `fxc_b<j>`)."""
        return self.idents[("offset", self.kernel.params.index(buf))]

    def loop(self, s: For):
        for st in walk_stmts(s.body):
            if isinstance(st, Store):
                self.invalidate(st.buf)
            elif isinstance(st, Barrier):
                self.invalidate_shared()
        v = self.var_name(s.var)
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
            self.block(s.body, ((s.var, v),), (v,))
            self.emit("}")
            return
        end = self.expr(s.extent) if not isinstance(s.extent, int) else str(s.extent)
        self.emit(f"for (int {v} = {s.start}; {v} < {end}; ++{v}) {{")
        self.block(s.body, ((s.var, v),), (v,))
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
        if isinstance(e, Bin) and e.args[0] in ("add", "sub", "mul", "div") and e.dtype == "float32" \
                and any(isinstance(a, Const) and math.isnan(a.value) for a in e.args[1:]):
            return self.float_const(math.nan, "float32")    # x op NaN is NaN: GLSL may fold 0 * NaN to 0 (Mesa
            # does: the mean over an empty dim, sum * (1 / 0) folded to NaN, was 0)
        if e.dtype in REFUSED:
            raise LoweringError(f"{self.kernel.name}: {REFUSED[e.dtype]} arithmetic; GLSL computes float32")
        return super().compute(e)

    # -- values ------------------------------------------------------------------------------------------
    def int_const(self, v: int, dt: str) -> str:
        return int32_const(v, dt, INT_MIN, self.kernel.name, "GLSL")

    def float_const(self, v: float, dt: str) -> str:
        if math.isnan(v):
            return "uintBitsToFloat(0x7FC00000u)"
        if math.isinf(v):
            return "uintBitsToFloat(0xFF800000u)" if v < 0 else "uintBitsToFloat(0x7F800000u)"
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
        main = [f"  int {self.offset(b)} = fxc_b{j} >> {SHIFT[b.dtype]};" for j, b in enumerate(k.params)]
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
            out.append(HELPERS[name])
    for op in ("truncdiv", "truncmod", "floordiv", "floormod"):
        if op in need:
            out.append(f"int fxc_{op}(int x, int y) {{ if (y == 0) fxc_i32[0] = 1; "
                       f"int s = (y == 0 || y == -1) ? 1 : y; {INT_DIV[op]} }}")
    return "\n".join(out)


def render_glsl(kernels: list) -> str:
    """One program text: each kernel's compute shader after a `// fxc_kernel <name>` line."""
    return "".join(f"// fxc_kernel {k.name}\n" + GLSLRenderer(k).kernel_text() for k in kernels)


def needs_fp64(k: Kernel) -> bool:
    """GLSL kernels never compute in float64 (the renderer refuses it with a LoweringError instead)."""
    return False
