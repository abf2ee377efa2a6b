"""The OpenCL C renderer: device loop-IR Kernels -> one OpenCL C program (source text).

Takes Kernels whose launch geometry is set (fxc.lowering.schedules.gpu) and whose expressions are scalar
(fxc.lowering.legalize.scalarize) but for float32 vectors of 2, 4, 8 or 16 lanes made of contiguous loads, lane-wise
arithmetic and stores (floatN, vloadN / vstoreN: any float's alignment will do, from global, local or private
memory). Each becomes a `__kernel` whose buffer parameters are `__global` pointers
with a byte offset each (inputs, outputs and the planned workspace are a few OpenCL buffers; a kernel's
operand is a pointer into one), then `fxc_err`, an int the generated code sets when an integer division by
zero happens (the runtime raises as eager does). Grid and thread loops read get_group_id / get_local_id,
shared buffers are `__local`, barriers `barrier(CLK_LOCAL_MEM_FENCE)`. Semantics follow the CPU backend:
float max/min propagate NaN, float -> int casts give INT_MIN for NaN and out-of-range values (x86), integer
division never traps, float16 / bfloat16 are storage types (vload_half / vstore_half, bfloat16 as the raw
16 bits, rounded to nearest even).
"""
from __future__ import annotations

from ...errors import LoweringError
from ...lowering.loop_ir import Buffer, Kernel, stmt_exprs, walk_stmts
from ...symbolic.expr import walk
from ..cstyle import CStyleRenderer

VALUE = {"float32": "float", "float64": "double", "int64": "long", "int32": "int", "int16": "short", "int8": "char",
         "uint8": "uchar", "bool": "bool", "float16": "float", "bfloat16": "float"}
MEMORY = dict(VALUE, bool="uchar", float16="half", bfloat16="ushort")
INT_MIN = {"int64": "(-9223372036854775807L - 1)", "int32": "(-2147483647 - 1)"}

_F = ("float32", "float64", "float16", "bfloat16")


def _fmaxmin(fn):
    """max/min that propagate NaN (LLVM's maximum/minimum, and PyTorch's)."""
    return lambda r, dt, a, b: f"((isnan({a}) || isnan({b})) ? ({a} + {b}) : {fn}({a}, {b}))"


def _int_div(op):
    def code(r, dt, a, b):
        r.used.add(f"{op}:{dt}")
        return f"fxc_{op}_{VALUE[dt]}({a}, {b}, fxc_err)"
    return code


def _float_floormod(r, dt, a, b):
    r.used.add(f"floormod:{dt}")
    return f"fxc_floormod_{VALUE[dt]}({a}, {b})"


def _abs_int(r, dt, a):
    return a if dt in ("uint8", "bool") else f"(({VALUE[dt]})abs({a}))"


def _helper(name):
    def code(r, dt, *args):
        r.used.add(name)
        return f"fxc_{name}({', '.join(args)})"
    return code


def _wrapping(sym):
    """+, -, * on int32 / int64 wrap (two's complement, as on the CPU): through the unsigned type, since signed
    overflow is undefined in C and the compiler may assume it away."""
    def code(r, dt, a, b):
        if dt in ("int64", "int32"):
            u = "ulong" if dt == "int64" else "uint"
            return f"(({VALUE[dt]})(({u}){a} {sym} ({u}){b}))"
        return f"({a} {sym} {b})"
    return code


CODE_FOR_OP = {
    "add.i": _wrapping("+"), "sub.i": _wrapping("-"), "mul.i": _wrapping("*"),
    # float arithmetic beyond C's infix operators
    "max.f": _fmaxmin("fmax"), "min.f": _fmaxmin("fmin"), "max.i": "max({0}, {1})", "min.i": "min({0}, {1})",
    "max.b": "({0} | {1})", "min.b": "({0} & {1})",
    "pow.f": "pow({0}, {1})", "atan2.f": "atan2({0}, {1})", "hypot.f": "hypot({0}, {1})",
    "nextafter.f": "nextafter({0}, {1})", "copysign.f": "copysign({0}, {1})", "fma.f": "fma({0}, {1}, {2})",
    "truncmod.f": "fmod({0}, {1})", "floordiv.f": "floor({0} / {1})", "truncdiv.f": "trunc({0} / {1})",
    "floormod.f": _float_floormod,
    # integer division that never traps (division by zero sets fxc_err, MIN / -1 wraps)
    "div.i": _int_div("truncdiv"), "truncdiv.i": _int_div("truncdiv"), "floordiv.i": _int_div("floordiv"),
    "truncmod.i": _int_div("truncmod"), "floormod.i": _int_div("floormod"),
    "and.b": "({0} && {1})", "or.b": "({0} || {1})", "xor.b": "({0} != {1})",
    # unary
    "neg": "(-{0})", "not.b": "(!{0})", "not.i": "(~{0})", "abs.f": "fabs({0})", "abs.i": _abs_int,
    "isnan.f": "(isnan({0}) != 0)", "isinf.f": "(isinf({0}) != 0)", "signbit.f": "(signbit({0}) != 0)",
    "isnan.i": "false", "isinf.i": "false", "signbit.i": "({0} < 0)",
    "sigmoid.f": "(({T})1 / (({T})1 + exp(-{0})))", "round.f": "rint({0})",
    **{f"{fn}.f": fn + "({0})" for fn in ("exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "erf", "floor", "ceil",
                                          "trunc", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                          "log2", "log10", "exp2", "expm1", "log1p", "lgamma", "erfc")},
    # an index checked as eager checks it: the first bad one of a call is recorded in fxc_err[1..6] (see below)
    "check_index": "fxc_check_index({0}, {1}L, {2}, {3}, fxc_err)",
    "pack_bf16": _helper("pack_bf16"), "bf16_half0": _helper("bf16_lo"), "bf16_half1": _helper("bf16_hi"),
}

_DIV_HELPERS = {
    "truncdiv": "return (y == -1) ? NEG : x / s;",
    "truncmod": "return (y == -1) ? 0 : x % s;",
    "floordiv": "T q = x / s; T m = x % s; if (m != 0 && ((m ^ s) < 0)) q -= 1; return (y == -1) ? NEG : q;",
    "floormod": "T m = x % s; if (m != 0 && ((m ^ s) < 0)) m += s; return (y == -1) ? 0 : m;",
}
_UNSIGNED_DIV = {"truncdiv": "return x / s;", "truncmod": "return x % s;", "floordiv": "return x / s;",
                 "floormod": "return x % s;"}

_HELPERS = {
    "pack_bf16": "int fxc_pack_bf16(float lo, float hi) { return (int)fxc_f32_to_bf16(lo) | "
                 "((int)fxc_f32_to_bf16(hi) << 16); }",
    "bf16_lo": "float fxc_bf16_lo(int w) { return as_float(w << 16); }",
    "bf16_hi": "float fxc_bf16_hi(int w) { return as_float(w & (int)0xFFFF0000); }",
}

PREAMBLE = """\
ushort fxc_f32_to_bf16(float x) {
  uint b = as_uint(x);
  return isnan(x) ? (ushort)0x7FC0 : (ushort)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
float fxc_bf16_to_f32(ushort h) { return as_float((uint)h << 16); }
float fxc_round_bf16(float x) { return fxc_bf16_to_f32(fxc_f32_to_bf16(x)); }
float fxc_round_half(float x) { ushort h; vstore_half_rte(x, 0, (half *)&h); return vload_half(0, (const half *)&h); }
long fxc_check_index(long i, long size, int wrap, int op, __global int *err) {
  long j = (wrap && i < 0) ? i + size : i;
  if (j >= 0 && j < size) return j;
  if (atomic_cmpxchg(err + 1, 0, 1) == 0) {
    err[2] = op; err[3] = (int)(i & 0xFFFFFFFFL); err[4] = (int)(i >> 32);
    err[5] = (int)(size & 0xFFFFFFFFL); err[6] = (int)(size >> 32);
  }
  return 0;
}
"""
# fxc_err (fxc.runtime.opencl.module.ERROR_WORDS ints): [0] integer division by zero; [1] an index out of range,
# [2] its op, [3:5] the index, [5:7] the dimension's size (low and high 32-bit words)


class OpenCLRenderer(CStyleRenderer):
    has_local = True
    bound_index = {"grid": "get_group_id", "thread": "get_local_id"}
    index_type = "int"                  # indices proven to fit 32 bits (fxc.lowering.int_ranges) are ints
    vector_widths = (2, 4, 8, 16)       # fxc.runtime.opencl.device.opencl_caps's vector_widths
    types = VALUE
    memory_types = MEMORY
    code_for_op = CODE_FOR_OP

    def int_const(self, v: int, dt: str) -> str:
        if dt == "int64":
            return INT_MIN["int64"] if v == -2 ** 63 else f"{v}L"
        if dt == "int32":
            return INT_MIN["int32"] if v == -2 ** 31 else str(v)
        return f"(({VALUE[dt]}){v})"

    def nan(self, dt: str) -> str:
        return "(double)NAN" if dt == "float64" else "NAN"

    def inf(self, dt: str) -> str:
        return "(double)INFINITY" if dt == "float64" else "INFINITY"

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def vector_type(self, dtype: str, lanes: int) -> str:
        return f"{VALUE[dtype]}{lanes}"

    def vload_code(self, name: str, idx: str, lanes: int) -> str:
        return f"vload{lanes}(0, {name} + {idx})"

    def vstore_code(self, name: str, idx: str, value: str, lanes: int) -> str:
        return f"vstore{lanes}({value}, 0, {name} + {idx})"

    def lane_code(self, vector: str, k: int) -> str:
        return f"{vector}.s{k:x}"

    def load_code(self, buf: Buffer, name: str, idx: str) -> str:
        if buf.dtype == "bool":
            return f"({name}[{idx}] != 0)"
        if buf.dtype == "float16":
            return f"vload_half({idx}, {name})"
        if buf.dtype == "bfloat16":
            return f"fxc_bf16_to_f32({name}[{idx}])"
        return f"{name}[{idx}]"

    def store_code(self, buf: Buffer, name: str, idx: str, value: str) -> str:
        if buf.dtype == "bool":
            return f"{name}[{idx}] = (uchar){value}"
        if buf.dtype == "float16":
            return f"vstore_half_rte({value}, {idx}, {name})"
        if buf.dtype == "bfloat16":
            return f"{name}[{idx}] = fxc_f32_to_bf16({value})"
        return f"{name}[{idx}] = {value}"

    def cast_code(self, fr: str, to: str, x: str) -> str:
        if fr == to:
            return x
        if to == "bool":
            return f"({x} != 0)"
        if to == "float16":             # values of the storage types are floats rounded to them
            return f"fxc_round_half((float){x})"
        if to == "bfloat16":
            return f"fxc_round_bf16((float){x})"
        if fr in _F and to not in _F:   # as x86 (and so PyTorch): truncate through int32 (int64 for int64);
            wide = "long" if to == "int64" else "int"      # NaN and out of range give MIN, narrower types wrap
            lim = ("0x1p63" if to == "int64" else "0x1p31") + ("" if fr == "float64" else "f")  # no double unless x is
            w = f"(fabs({x}) < {lim} ? ({wide}){x} : {INT_MIN['int64' if wide == 'long' else 'int32']})"
            return w if wide == VALUE[to] else f"(({VALUE[to]}){w})"
        return f"(({VALUE[to]}){x})"

    def param_decls(self, name: str) -> tuple:
        return (name, f"{name}_base", f"{name}_offset")

    # -- the kernel ------------------------------------------------------------------------------------
    def kernel_text(self) -> str:
        k = self.kernel
        if k.launch is None:
            raise LoweringError(f"{k.name}: a device kernel needs its launch geometry (lower it with "
                                f"fxc.lowering.schedules.gpu)")
        body = self.body_text()
        args, prologue = [], []
        for b in k.params:
            n, t = self.name_of(b), MEMORY[b.dtype]
            args += [f"__global {t} *{n}_base", f"ulong {n}_offset"]
            prologue.append(f"  __global {t} *{n} = (__global {t} *)((__global char *){n}_base + {n}_offset);")
        args.append("__global int *fxc_err")
        for b, n in self.private.items():
            if b.dtype in ("float16", "bfloat16") and b.scope == "private":
                raise LoweringError(f"{k.name}: private buffer {b.name} of {b.dtype} (a storage type) is not "
                                    f"supported on OpenCL")
            space = "__local " if b.scope == "shared" else ""
            prologue.append(f"  {space}{MEMORY[b.dtype]} {n}[{max(b.size, 1)}];")
        if self.exact:      # its Exact ops round as written on compilers that fuse across statements (NVIDIA's)
            prologue.insert(0, "  #pragma OPENCL FP_CONTRACT OFF")
        wg = "x".join(map(str, k.launch.block))
        attr = f"__attribute__((reqd_work_group_size({', '.join(map(str, (list(k.launch.block) + [1, 1])[:3]))})))"
        head = f"__kernel {attr} void {k.name}({', '.join(args)})"
        text = "\n".join([f"/* {k.name}: {k.launch} (work-group {wg}) */", f"{head} {{", *prologue, body, "}"])
        return text + "\n"


def helper_text(used: set) -> str:
    out = []
    for key in sorted(used):
        if ":" in key:
            op, dt = key.split(":")
            t = VALUE[dt]
            body = (_UNSIGNED_DIV if dt in ("uint8", "bool") else _DIV_HELPERS)[op].replace("T ", f"{t} ")
            body = body.replace("NEG", f"({t})(0UL - (ulong)x)")       # MIN / -1 wraps, as on the CPU
            out.append(f"{t} fxc_{op}_{t}({t} x, {t} y, __global int *err) {{ if (y == 0) *err = 1; "
                       f"{t} s = (y == 0 || y == -1) ? ({t})1 : y; {body} }}"
                       if dt not in ("uint8", "bool") else
                       f"{t} fxc_{op}_{t}({t} x, {t} y, __global int *err) {{ if (y == 0) *err = 1; "
                       f"{t} s = (y == 0) ? ({t})1 : y; {body} }}")
        else:
            out.append(_HELPERS[key])
    return "\n".join(out)


def _float_mod_helpers(used: set) -> str:
    out = []
    for key in sorted(u for u in used if u.startswith("floormod:") and u.split(":")[1] in _F):
        t = VALUE[key.split(":")[1]]
        out.append(f"{t} fxc_floormod_{t}({t} x, {t} y) {{ {t} m = fmod(x, y); "
                   f"return (m != 0 && ((m < 0) != (y < 0))) ? m + y : m; }}")
    return "\n".join(out)


def render_opencl(kernels: list) -> str:
    """One OpenCL C program defining every kernel (each with its launch geometry set, expressions scalar)."""
    texts, used, fp64 = [], set(), False
    for k in kernels:
        r = OpenCLRenderer(k)
        texts.append(r.kernel_text())
        used |= r.used
        fp64 = fp64 or needs_fp64(k)
    float_mods = {u for u in used if u.startswith("floormod:") and u.split(":")[1] in _F}
    head = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if fp64 else []
    return "\n".join(head + [PREAMBLE, helper_text(used - float_mods), _float_mod_helpers(float_mods), ""] + texts)


def needs_fp64(k: Kernel) -> bool:
    """Whether a kernel computes or stores float64 (the device then needs cl_khr_fp64)."""
    if any(b.dtype == "float64" for b in k.params):
        return True
    for st in walk_stmts(k.body):
        for e in stmt_exprs(st):
            if any(x.dtype == "float64" for x in walk(e)):
                return True
    return False

