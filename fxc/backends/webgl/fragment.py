"""The WebGL 2 fragment renderer: a one-work-item-per-output device Kernel -> a GLSL ES 3.00 fragment shader (the
`webgl` target's scalar form, on the GL compute renderer fxc.backends.glsl).

Takes Kernels lowered for a WebGL target's Caps (fxc.lowering.schedules.gpu: work-groups of one, no shared
memory) and scalarised; produces one fragment shader a kernel (WebGLRenderer.kernel_text): the fragment at (x, y)
of the output texture is the work-item y * width + x, every tensor a 2-D texture. fxc.backends.webgl.lanes builds
on it (four outputs a fragment), fxc.backends.webgl.draw_buffers on that (several texels a fragment), and
fxc.backends.webgl.program chooses among them per kernel. Also here: the GLSL ES head and trigonometry, and
`select_code`, the select without a ternary that SwiftShader needs.
"""
from __future__ import annotations

from ...errors import LoweringError
from ...lowering.int_ranges import check_int64_narrowable
from ...lowering.loop_ir import Buffer, For, Kernel, LetStmt, Store, stmt_exprs, walk_stmts
from ...symbolic.expr import Bin, Cast, CheckIndex, Const, Load, Present, Select, Var, children
from ..glsl import HELPERS, INT_DIV, REFUSED, VALUE, GLSLRenderer, helper_text

ES_HEAD = """#version 300 es
precision highp float;
precision highp int;
precision highp sampler2D;
precision highp isampler2D;
#define FXC_INF uintBitsToFloat(0x7F800000u)
bool signbit_(float x) { return (floatBitsToUint(x) >> 31) != 0u; }
"""
FLOAT_TEX = ("float32",)
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
    if dtype in FLOAT_TEX:
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
    exact_qualifier = ""                # GLSL ES 3.00 has no `precise` (ES 3.20 has)

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

    def kernel_names(self) -> list:
        return []                       # no offsets: a fragment reads textures

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
                and e.args[1].dtype not in FLOAT_TEX and e.dtype != "bool":
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
        src = i.args[1] if isinstance(i, Cast) and i.args[1].dtype not in FLOAT_TEX else i
        if not (isinstance(src, Load) and src.args[0] in self.kernel.params and src.args[0].dtype not in FLOAT_TEX):
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
                f"layout(location = 0) out {'highp float' if out.dtype in FLOAT_TEX else 'highp int'} fxc_out;"]
        head += [f"uniform {'sampler2D' if b.dtype in FLOAT_TEX else 'isampler2D'} fxc_t{j};"
                 for j, b in enumerate(k.params) if b is not out]
        main = [f"  {VALUE[b.dtype]} {n}[{max(b.size, 1)}];" for b, n in self.private.items()]
        helpers = helper_text({u for u in self.used if u in HELPERS}) + (ES_TRIG if self.trig else "")
        divs = [f"int fxc_{op}(int x, int y) {{ int s = y; {INT_DIV[op]} }}" for op in INT_DIV if op in self.used]
        return "\n".join(head + [helpers, *divs, "void main() {",
                                 "  int fxc_i = int(gl_FragCoord.y) * FXC_W + int(gl_FragCoord.x);",
                                 f"  if (fxc_i >= {out.size}) {{ discard; }}", *main, body, "}", ""])
