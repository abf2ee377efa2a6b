"""WebGL fragments that compute four outputs each, over RGBA textures (the `webgl` target's renderer).

Takes a one-work-item-per-output Kernel (as fxc.backends.webgl.fragment.WebGLRenderer does) and produces a GLSL ES 3.00
fragment shader whose fragment f computes the work-items 4f .. 4f+3 (its four "lanes") and writes them as one
RGBA texel. Every tensor is packed flat, four consecutive elements a texel (element e: texel e >> 2, component
e & 3), in RGBA32F (float32) or RGBA32I (integers) textures `width` texels wide.

Why (SwiftShader, where a texelFetch costs most of a multiply-add): the lanes share what does not depend on them,
and a read of four consecutive elements is one fetch (two when not aligned to a texel). Each int expression that
depends on the lane is analysed as affine, `base + k * lane`, while that is provable: with the work-item index
4f + lane (base a multiple of 4), `g // W` is the same in every lane and `g % W` is `(4f % W) + lane` when W is a
multiple of 4 and the values are non-negative. So in a convolution or a matmul whose output's innermost extent is a
multiple of 4, the output's other coordinates, the weights' indices and their fetches are computed once for four
outputs, and the input row's four elements come in one or two fetches. What is not provably affine is computed
per lane (four scalar temporaries: SwiftShader runs four fragments in SIMD, so scalar code costs the same).

A kernel whose loop bounds or `if` conditions depend on the lane renders in "loop" mode: the four lanes one after
another in a loop of the shader (correct for any kernel the scalar renderer takes; fewer fragments, no sharing).
"""
from __future__ import annotations

import dataclasses
import math
import operator

import numpy as np

from ...errors import LoweringError
from ...lowering.loop_ir import For, IfThen, LetStmt, Store, map_body, walk_stmts
from ...symbolic.expr import Bin, Cast, Const, Load, Select, Un, Var, binary, children, substitute
from ..glsl import HELPERS, INT_DIV, VALUE, helper_text
from .fragment import ES_HEAD, ES_TRIG, FLOAT_TEX, WebGLRenderer

TEXEL_WIDTH = 4
_INTS = ("int32", "int64")
_ALIGNED = 1 << 30          # the alignment of 0: a multiple of everything
# no `?:` in these (select_code: SwiftShader's compiler hangs on ternary chains in loops); a float select is
# mix(x, y, bool), exact for NaN / inf; an int one a mask (sel: ESSL 3.00 has no int mix)
LD4 = """{v} fxc_ld4{s}({sampler} s, int e) {{ int q = e >> 2, r = e & 3; {v} a = texelFetch(s, fxc_at(q), 0);
  if (r == 0) return a;
  {v} b = texelFetch(s, fxc_at(q + 1), 0);
  {v} x1 = {v}(a.yzw, b.x), x2 = {v}(a.zw, b.xy), x3 = {v}(a.w, b.xyz);
  {sel} }}"""
LD4_SEL = {"f": "return mix(mix(x1, x2, bvec4(r == 2)), x3, bvec4(r == 3));",
           "i": "ivec4 m2 = ivec4(-int(r == 2)), m3 = ivec4(-int(r == 3)); ivec4 x = (x1 & ~m2) | (x2 & m2); "
                "return (x & ~m3) | (x3 & m3);"}


def _trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


_EVAL = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "max": np.maximum, "min": np.minimum,
         "idiv": _trunc_div, "imod": lambda a, b: a - b * _trunc_div(a, b)}


def _inline_single(s):
    """s with every loop of one iteration replaced by its body (its variable the start): reductions over a 1x1
    window become innermost loops, which unroll, and their indices simplify."""
    if isinstance(s, For) and s.kind in ("serial", "unroll") and s.extent == 1:
        return _subst(_inline_single(s.body), {s.var: Const(s.start, s.var.dtype)})
    return map_body(s, _inline_single)


PICK = {"f": "float fxc_pickf(vec4 v, int c) { return mix(mix(v.x, v.y, c == 1), mix(v.z, v.w, c == 3), c >= 2); }",
        "i": "int fxc_picki(ivec4 v, int c) { ivec4 m = -ivec4(equal(ivec4(c), ivec4(0, 1, 2, 3))); "
             "return (v.x & m.x) | (v.y & m.y) | (v.z & m.z) | (v.w & m.w); }"}


class _Lanes:
    """A lane-dependent value: the GLSL text of each lane's value, and its affine form (base text, k, align,
    nonneg: lane l's value is base + k * l, base a multiple of align, every lane >= 0 when nonneg) or None."""

    __slots__ = ("texts", "aff")

    def __init__(self, texts, aff=None):
        self.texts, self.aff = texts, aff

    def __str__(self):
        raise LoweringError("internal: a lane-dependent value used as one value")


def _subst(s, mapping: dict):
    """Statement s with its expressions' variables replaced (mapping: Var -> Expr)."""
    if isinstance(s, Store):
        return Store(s.buf, substitute(s.index, mapping), substitute(s.value, mapping))
    if isinstance(s, LetStmt):
        return LetStmt(s.var, substitute(s.value, mapping), _subst(s.body, mapping))
    if isinstance(s, IfThen):
        return IfThen(substitute(s.cond, mapping), _subst(s.then, mapping),
                      None if s.orelse is None else _subst(s.orelse, mapping))
    return map_body(s, lambda x: _subst(x, mapping))


def _walk(e):
    yield e
    for c in children(e):
        yield from _walk(c)


class WebGLLanesRenderer(WebGLRenderer):
    """The WebGL renderer with four outputs a fragment (see the module docstring)."""

    def __init__(self, kernel, width: int, offsets: bool = False):
        super().__init__(dataclasses.replace(kernel, body=_inline_single(kernel.body)), width)
        self.offsets = offsets          # row launches: each parameter j at a texel offset, uniform fxc_q{j}
        self.tiles = None               # (tiles, rows): a draw-buffer part drawn as tiles (program.part_tiles)
        self.lane = None                # the lane whose text expr() gives, while a lane's value is rendered
        self._vary: dict = {}
        self.vvars = self._varying_vars()
        self.mode = "lanes" if self._lanes_ok() else "loop"
        self.ld4: set = set()           # the helpers used: fxc_ld4f / fxc_ld4i ("f", "i"), fxc_pickf / fxc_picki
        self.unrolled: set = set()      # variables of loops unrolled by 4 (multiples of 4 in the shader)
        self._share = None              # (env depth of an unrolled copy, the scope its loop's body shares)
        self._mods: dict = {}
        self._single = {st.var: st.start for st in walk_stmts(kernel.body) if isinstance(st, For)
                        and st.kind not in ("grid", "thread") and st.extent == 1}
        self.lets: dict = {}            # lane-dependent let-bound variables (not g itself) -> their values in g
        self._evals: dict = {}
        self.top: list = []             # lines computed once at the top of main (lane 0's values of g's functions)
        self.g0 = Var("fxc_g", "int64")
        self.env[0][self.g0] = "fxc_g"

    # -- which values depend on the lane --------------------------------------------------------------------
    def _varying_vars(self) -> set:
        """The grid variable and every let-bound variable whose value depends on it (or on private memory)."""
        out: set = set()
        for st in walk_stmts(self.kernel.body):
            if isinstance(st, For) and st.kind == "grid":
                out.add(st.var)
            elif isinstance(st, LetStmt) and self._depends(st.value, out):
                out.add(st.var)
        return out

    def _depends(self, e, vvars: set) -> bool:
        return any((isinstance(x, Var) and x in vvars) or (isinstance(x, Load) and x.args[0].scope != "global")
                   for x in _walk(e))

    def varying(self, e) -> bool:
        got = self._vary.get(e)
        if got is None:
            if isinstance(e, Var):
                got = e in self.vvars
            elif isinstance(e, Load) and e.args[0].scope != "global":
                got = True
            else:
                got = any(self.varying(c) for c in children(e))
            self._vary[e] = got
        return got

    def _lanes_ok(self) -> bool:
        """Loop bounds and `if` conditions the same in every lane (else the kernel renders in loop mode)."""
        for st in walk_stmts(self.kernel.body):
            if isinstance(st, For) and st.kind not in ("grid", "thread") and not isinstance(st.extent, int) \
                    and self._depends(st.extent, self.vvars):
                return False
            if isinstance(st, IfThen) and self._depends(st.cond, self.vvars):
                return False
        return True

    def private_decls(self, name: str) -> tuple:
        return tuple(f"{name}_{c}" for c in range(TEXEL_WIDTH)) if self.mode == "lanes" else (name,)

    # -- statements -----------------------------------------------------------------------------------------
    def loop(self, s: For):
        if s.kind != "grid":
            if self._unrollable(s):
                return self._unroll(s)
            return super().loop(s)
        if s.axis != 0 or len(self.kernel.launch.grid) != 1:
            raise LoweringError(f"{self.kernel.name}: WebGL runs one-dimensional grids of work-items")
        self.frag.add(s.var)
        if self.mode == "lanes":
            g = _Lanes(["fxc_g"] + [f"(fxc_g + {j})" for j in range(1, TEXEL_WIDTH)], ("fxc_g", 1, TEXEL_WIDTH, True))
            self.block(s.body, ((s.var, g),))
            return
        self.emit(f"for (int fxc_l = 0; fxc_l < {TEXEL_WIDTH}; ++fxc_l) {{")
        self.block(s.body, ((s.var, "(fxc_g + fxc_l)"),))
        self.emit("}")

    def _unrollable(self, s: For) -> bool:
        return self.mode == "lanes" and s.kind in ("serial", "unroll") and isinstance(s.extent, int) \
            and s.start == 0 and s.extent % TEXEL_WIDTH == 0 and s.extent >= TEXEL_WIDTH \
            and not any(isinstance(st, For) for st in walk_stmts(s.body))

    def _unroll(self, s: For):
        """An innermost loop of a constant extent that is a multiple of 4, four iterations a step: a read of four
        consecutive elements over the iterations (a reduction along a tensor's innermost dim) is one texel, fetched
        once for the four (the four copies share the loop body's scope for texels)."""
        self.hoist(s)
        for st in walk_stmts(s.body):
            if isinstance(st, Store):
                self.invalidate(st.buf)
        v = self.var_name(s.var)
        one = s.extent == TEXEL_WIDTH       # one step: a block (its variable the constant 0), not a loop
        self.emit("{" if one else f"for (int {v} = 0; {v} < {s.extent}; {v} += {TEXEL_WIDTH}) {{")
        self.unrolled.add(s.var)
        self.enter(((s.var, v),), () if one else (v,))
        saved = self._share
        self._share = (len(self.env) + 1, self.env[-1])
        self.depth += 1
        for u in range(TEXEL_WIDTH):
            step = Const(u, s.var.dtype) if one else binary("add", s.var, Const(u, s.var.dtype)) if u else s.var
            body = _subst(s.body, {s.var: step}) if one or u else s.body
            self.enter()
            self.stmt(body)
            self.leave()
        self.depth -= 1
        self._share = saved
        self.leave()
        self.emit("}")

    def bind(self, e, text):
        """In an unrolled loop's copies, a value that reads no memory the kernel writes (an index, an input's texel)
        and no variable a copy binds itself is bound in the loop body's scope: the copies compute it once (their own
        copies of the same expression)."""
        share = self._share
        if share and len(self.env) == share[0] and not isinstance(e, Var) \
                and all(b.scope == "global" and b is not self.outputs[0] for b in self.reads(e)) \
                and not any(isinstance(x, Var) and x in self.env[-1] for x in _walk(e)):   # a copy's own let
            env, self.env = self.env, self.env[:-2] + [share[1]]
            try:
                return super().bind(e, text)
            finally:
                self.env = env
        return super().bind(e, text)

    def stmt(self, s):
        if self.mode == "lanes" and isinstance(s, LetStmt) and self.varying(s.value):
            if self._is_frag(s.value):
                self.frag.add(s.var)
            else:
                self.lets[s.var] = self._expand(s.value)
            self.env[-1][s.var] = self._lanes(s.value)
            self.stmt(s.body)
            return
        super().stmt(s)

    def output_of(self, index):
        """The GLSL output a store at `index` writes (its own texel: fxc_out), or None (a scatter)."""
        return "fxc_out" if index in self.frag else None

    def output_decls(self, vec: str) -> list:
        """The shader's output declarations (fxc.backends.webgl.draw_buffers: one per draw buffer)."""
        return [f"layout(location = 0) out highp {vec} fxc_out;"]

    def store(self, s: Store):
        out = s.buf.scope == "global"
        name = self.output_of(s.index) if out else None
        if out and name is None:
            raise LoweringError(f"{self.kernel.name}: stores {s.buf.name} at another index than its own work-item's "
                                f"(a scatter), which a WebGL fragment cannot")
        if self.mode == "loop":
            if not out:
                return super().store(s)
            v = self.expr(s.value)
            self.emit(f"fxc_r[fxc_l] = {'int(' + v + ')' if s.buf.dtype == 'bool' else v};")
            return
        values = []
        for j in range(TEXEL_WIDTH):
            self.lane = j
            values.append(self.expr(s.value))
            if not out:
                self.emit(f"{self.name_of(s.buf)}_{j}[{self.expr(s.index)}] = {values[-1]};")
        self.lane = None
        if out:
            vec = "vec4" if s.buf.dtype in FLOAT_TEX else "ivec4"
            conv = (lambda v: f"int({v})") if s.buf.dtype == "bool" else (lambda v: v)
            self.emit(f"{name} = {vec}({', '.join(conv(v) for v in values)});")
        self.invalidate(s.buf)

    # -- expressions ----------------------------------------------------------------------------------------
    def expr(self, e):
        if self.mode == "lanes" and not isinstance(e, Const) and self.varying(e):
            got = self._lanes(e)
            return got if self.lane is None else got.texts[self.lane]
        return super().expr(e)

    def _lanes(self, e) -> _Lanes:
        got = self.lookup(e)
        if got is None:
            got = self._render_lanes(e)
            self.bind(e, got)
        if not isinstance(got, _Lanes):
            raise LoweringError(f"{self.kernel.name}: internal: {e!r} bound to one value, used per lane")
        return got

    def _render_lanes(self, e) -> _Lanes:
        saved, self.lane = self.lane, None
        try:
            aff = self._affine(e) if e.dtype in _INTS else None
            if aff is not None:         # the base once, in a temporary (hoisted with the loop-invariant values)
                base, k = aff[0], aff[1]
                if not base.isidentifier():
                    t = self.new()
                    self.emit(f"int {t} = {base};")
                    base, aff = t, (t, *aff[1:])
                return _Lanes([base if k * j == 0 else f"({base} + {k * j})" for j in range(TEXEL_WIDTH)], aff)
            if isinstance(e, Load) and e.args[0].scope == "global":
                got = self._texel_load(e) or self._row_load(e)
                if got is not None:
                    return got
            elif e.dtype in _INTS + ("bool",) and self._uniform(e):    # the same in every lane: computed once
                self.lane = 0
                code = self.compute(e)
                t = self.new()
                self.emit(f"{self.type_of(e)} {t} = {code};")
                return _Lanes([t] * TEXEL_WIDTH, (t, 0, 1, False) if e.dtype in _INTS else None)
            texts, done = [], {}         # a lane whose code is another's (the same operands) reuses its value
            for j in range(TEXEL_WIDTH):
                self.lane = j
                code = self.compute(e)
                if code not in done:
                    done[code] = self.new()
                    self.emit(f"{self.type_of(e)} {done[code]} = {code};")
                texts.append(done[code])
            return _Lanes(texts)
        finally:
            self.lane = saved

    def _uniform(self, e) -> bool:
        """The int or bool e has the same value in every lane of a fragment: it depends on the work-item index only
        through values that do (evaluated over the grid: `g // 4`, a row index), by integer and logical operators
        (a window's clamped row `min(max(g // 4 // W % H + r - 1, 0), H - 1)`: not affine, not evaluable alone)."""
        if not self.varying(e):
            return True
        if isinstance(e, Var) and e in self.lets:
            return self._uniform(self.lets[e])
        v = self._eval(self._expand(e))
        if v is not None:
            n = int(self.kernel.launch.grid[0])
            rows = np.broadcast_to(v, (-(-n // TEXEL_WIDTH) * TEXEL_WIDTH,)).reshape(-1, TEXEL_WIDTH)
            return bool((rows == rows[:, :1]).all())
        return isinstance(e, (Bin, Un, Cast, Select)) and all(self._uniform(c) for c in children(e))

    def _peel(self, e):
        """(rest, off): e = rest + off with off a constant (rest None: e is the constant)."""
        if isinstance(e, Const) and e.dtype in _INTS:
            return None, int(e.value)
        if isinstance(e, Bin) and e.args[0] in ("add", "sub"):
            (ra, oa), (rb, ob) = self._peel(e.args[1]), self._peel(e.args[2])
            if e.args[0] == "sub":
                return (e, 0) if rb is not None else (ra, oa - ob)
            return (ra if rb is None else rb if ra is None else binary("add", ra, rb)), oa + ob
        if isinstance(e, Bin) and e.args[0] == "mul" and isinstance(e.args[2], Const):
            ra, oa = self._peel(e.args[1])
            return (None if ra is None else binary("mul", ra, e.args[2])), oa * int(e.args[2].value)
        return e, 0

    def _mod(self, e):
        """(m, c): the lane-independent int e is c modulo m (m 0: e is exactly c; m 1: nothing known)."""
        got = self._mods.get(e)
        if got is not None:
            return got
        got = (1, 0)
        if isinstance(e, Const):
            got = (0, int(e.value))
        elif isinstance(e, Var):
            one = self._single.get(e)       # the variable of a loop of one iteration is its start
            got = (TEXEL_WIDTH, 0) if e in self.unrolled else (0, 0) if e in self.zero else (0, one) \
                if one is not None else (1, 0)
        elif isinstance(e, Cast) and e.args[1].dtype in _INTS:
            got = self._mod(e.args[1])
        elif isinstance(e, Bin) and e.args[0] in ("add", "sub", "mul"):
            (m1, c1), (m2, c2) = self._mod(e.args[1]), self._mod(e.args[2])
            if e.args[0] == "mul":
                m, c = math.gcd(math.gcd(m1 * m2, m1 * c2), m2 * c1), c1 * c2
            else:
                m, c = math.gcd(m1, m2), c1 + c2 if e.args[0] == "add" else c1 - c2
            got = (m, c % m if m else c)
        self._mods[e] = got
        return got

    def _texel(self, j: int, key, at, vec: str) -> str:
        """The texel at(), of parameter j, fetched once where `key` is visible (an unrolled loop's copies share it)."""
        key = ("texel", j) + key
        t = self.lookup(key)
        if t is None:
            t = self.new()
            self.emit(f"{vec} {t} = texelFetch(fxc_t{j}, fxc_at({at()}{self._q(j)}), 0);")
            scope = self._share[1] if self._share and len(self.env) == self._share[0] else self.env[-1]
            scope[key] = t
        return t

    def _texel_load(self, e):
        """A load as a component of a texel fetched once for every read of it (texts per lane, or one text), or
        None: when the index is (a multiple of 4 known here) + a constant, per lane or for every lane."""
        buf, idx = e.args
        if buf.scope != "global" or buf is self.outputs[0]:
            return None
        j = self.kernel.params.index(buf)
        vec = "vec4" if buf.dtype in FLOAT_TEX else "ivec4"
        wrap = (lambda x: f"({x} != 0)") if buf.dtype == "bool" else (lambda x: x)
        rest, off = self._peel(idx)
        if rest is None or not self.varying(rest):
            m, c = (0, 0) if rest is None else self._mod(rest)
            if m == 0:
                t = self._texel(j, (None, (c + off) >> 2), lambda: str((c + off) >> 2), vec)
                return wrap(f"{t}.{'xyzw'[(c + off) & 3]}")
            if m % TEXEL_WIDTH:
                return None
            o = c % TEXEL_WIDTH + off
            text = super().expr
            t = self._texel(j, (rest, o >> 2), lambda: f"({text(rest)} >> 2) + {o >> 2}", vec)
            return wrap(f"{t}.{'xyzw'[o & 3]}")
        aff = self._lanes(rest).aff
        if aff is None or aff[2] % TEXEL_WIDTH:
            if self._lane_align(rest) % TEXEL_WIDTH:
                return None
            texts = self._lanes(rest).texts      # every lane's index a multiple of 4 + off: a texel per lane
            at = [(lambda i: lambda: f"({texts[i]} >> 2) + {off >> 2}")(i) for i in range(TEXEL_WIDTH)]
            return _Lanes([wrap(f"{self._texel(j, (rest, off >> 2, i), at[i], vec)}.{'xyzw'[off & 3]}")
                           for i in range(TEXEL_WIDTH)])
        base, k = aff[0], aff[1]
        if k == 1:          # four consecutive elements: one texel when aligned, else two
            at = lambda i: lambda: f"({base} >> 2) + {(off + i) >> 2}"        # noqa: E731
            return _Lanes([wrap(f"{self._texel(j, (rest, (off + i) >> 2), at(i), vec)}.{'xyzw'[(off + i) & 3]}")
                           for i in range(TEXEL_WIDTH)])
        if k % TEXEL_WIDTH:
            return None
        at = [(lambda i: lambda: f"(({base} + {k * i}) >> 2) + {off >> 2}")(i) for i in range(TEXEL_WIDTH)]
        return _Lanes([wrap(f"{self._texel(j, (rest, off >> 2, i if k else None), at[i], vec)}.{'xyzw'[off & 3]}")
                       for i in range(TEXEL_WIDTH)])

    def _row_load(self, e):
        """Four consecutive elements (index base + lane, base not known aligned) in two fetches (fxc_ld4)."""
        buf, idx = e.args
        if buf is self.outputs[0]:
            return None
        aff = self._aff_of(idx)
        if aff is None or aff[1] != 1:
            return None
        j = self.kernel.params.index(buf)
        fl = buf.dtype in FLOAT_TEX
        t = self.new()
        self.ld4.add("f" if fl else "i")
        self.emit(f"{'vec4' if fl else 'ivec4'} {t} = fxc_ld4{'f' if fl else 'i'}(fxc_t{j}, {aff[0]}{self._q(j, 4)});")
        texts = [f"{t}.{c}" for c in "xyzw"]
        return _Lanes([f"({x} != 0)" for x in texts] if buf.dtype == "bool" else texts)

    def compute(self, e):
        if isinstance(e, Load) and e.args[0].scope == "global" and not self.varying(e):
            got = self._texel_load(e)
            if got is not None:
                return got
        return super().compute(e)

    def _aff_of(self, e):
        """The affine form of an int expression (a lane-independent one: k = 0), or None."""
        if e in self.zero:              # the thread variable (work-groups of one)
            return ("0", 0, _ALIGNED, True)
        if not self.varying(e):
            m, c = self._mod(e)
            align = (abs(c) or _ALIGNED) if m == 0 else math.gcd(m, c)
            return (super().expr(e), 0, align, True)
        return self._lanes(e).aff

    def _affine(self, e):
        """The affine form of a lane-dependent int e, or None. e is flattened into a sum of coefficient x atom
        (through +, -, x constant and the let-bound values); the atoms that depend on the lane must depend on the
        work-item index g alone: their sum is evaluated for every g of the grid (numpy), and it is affine when
        every fragment's lanes are its value at lane 0 plus k x lane. Its lane-0 value is computed once at the top
        of the shader (it depends on g only); the lane-independent atoms where e is."""
        got = self._affine_parts(e)
        if got is not None:
            return got
        terms: list = []
        self._terms(e, 1, terms)
        g_terms = [(c, a) for c, a in terms if a is not None and self.varying(a)]
        if not g_terms:
            return None
        vals = 0
        for c, a in g_terms:
            v = self._eval(self._expand(a))
            if v is None:
                return None
            vals = vals + c * v
        if np.ndim(vals) == 0:
            return None
        n = int(self.kernel.launch.grid[0])
        rows = vals.reshape(-1, TEXEL_WIDTH)
        k = int(rows[0, 1] - rows[0, 0]) if n > 1 else 0
        ok = rows == rows[:, :1] + k * np.arange(TEXEL_WIDTH)
        if not ok.reshape(-1)[:n].all():
            return None
        align = int(np.gcd.reduce(rows[:, 0])) or _ALIGNED
        parts = [self._at_top(c, a) for c, a in g_terms]
        for c, a in terms:
            if a is None:
                if c:
                    parts.append(str(c))
                    align = math.gcd(align, abs(c))
            elif not self.varying(a):
                m, r = self._mod(a)
                align = math.gcd(align, abs(c) * ((abs(r) or _ALIGNED) if m == 0 else math.gcd(m, r)))
                t = super().expr(a)
                parts.append(t if c == 1 else f"{t} * {c}")
        return ("(" + " + ".join(parts) + ")", k, align, True)

    def _lane_align(self, e) -> int:
        """A number every lane's value of the int e is a multiple of (1: nothing known): from its g-dependent atoms'
        values over the grid and its other atoms' residues."""
        terms: list = []
        self._terms(e, 1, terms)
        align, vals = 0, 0
        for c, a in terms:
            if a is None:
                align = math.gcd(align, abs(c))
            elif self.varying(a):
                v = self._eval(self._expand(a))
                if v is None:
                    return 1
                vals = vals + c * v
            else:
                m, r = self._mod(a)
                align = math.gcd(align, abs(c) * (abs(r) if m == 0 else math.gcd(m, r)))
        if np.ndim(vals):
            n = int(self.kernel.launch.grid[0])
            align = math.gcd(align, int(np.gcd.reduce(np.asarray(vals).reshape(-1)[:n])))
        return align or _ALIGNED

    def _affine_parts(self, e):
        """e's affine form from its operands' (+, -, x constant of affine values: where the operands' bases are
        already computed, an add or a multiply more), or None."""
        if isinstance(e, Cast) and e.args[1].dtype in _INTS:
            return self._aff_of(e.args[1])
        if not isinstance(e, Bin) or e.args[0] not in ("add", "sub", "mul"):
            return None
        op, a, b = e.args
        if op == "mul":
            a, b = (b, a) if isinstance(a, Const) else (a, b)
            if not isinstance(b, Const):
                return None
            x, c = self._aff_of(a), int(b.value)
            return None if x is None else (f"({x[0]} * {c})", x[1] * c, x[2] * abs(c) or _ALIGNED, True)
        x, y = self._aff_of(a), self._aff_of(b)
        if x is None or y is None:
            return None
        sign = 1 if op == "add" else -1
        return (f"({x[0]} {'+' if op == 'add' else '-'} {y[0]})", x[1] + sign * y[1], math.gcd(x[2], y[2]), True)

    def _terms(self, e, coef: int, out: list):
        if isinstance(e, Const) and e.dtype in _INTS:
            out.append((coef * int(e.value), None))
        elif isinstance(e, Var) and e in self.zero:
            pass
        elif isinstance(e, Cast) and e.args[1].dtype in _INTS:
            self._terms(e.args[1], coef, out)
        elif isinstance(e, Bin) and e.args[0] in ("add", "sub"):
            self._terms(e.args[1], coef, out)
            self._terms(e.args[2], -coef if e.args[0] == "sub" else coef, out)
        elif isinstance(e, Bin) and e.args[0] == "mul" and isinstance(e.args[2], Const):
            self._terms(e.args[1], coef * int(e.args[2].value), out)
        elif isinstance(e, Bin) and e.args[0] == "mul" and isinstance(e.args[1], Const):
            self._terms(e.args[2], coef * int(e.args[1].value), out)
        elif isinstance(e, Var) and e in self.lets:
            self._terms(self.lets[e], coef, out)
        else:
            out.append((coef, e))

    def _expand(self, e):
        """e with the lane-dependent let-bound variables replaced by their values (in terms of g)."""
        return substitute(e, self.lets) if self.lets else e

    def _eval(self, e):
        """The values of an int expression of g alone for every g of the grid (padded to whole fragments), or None."""
        if e in self._evals:
            return self._evals[e]
        got = None
        if isinstance(e, Const) and e.dtype in _INTS:
            got = np.int64(int(e.value))
        elif isinstance(e, Var):
            got = self._g_values() if e in self.frag else 0 if e in self.zero else None
        elif isinstance(e, Cast) and e.args[1].dtype in _INTS:
            got = self._eval(e.args[1])
        elif isinstance(e, Bin) and e.args[0] in _EVAL:
            a, b = self._eval(e.args[1]), self._eval(e.args[2])
            if a is not None and b is not None and not (e.args[0] in ("idiv", "imod") and np.any(b == 0)):
                got = _EVAL[e.args[0]](np.asarray(a, np.int64), np.asarray(b, np.int64))
        self._evals[e] = got
        return got

    def _g_values(self):
        n = self.kernel.launch.grid[0]
        if not isinstance(n, int):          # a symbolic grid: nothing is evaluated, the lanes are computed each
            return None
        return np.arange(-(-n // TEXEL_WIDTH) * TEXEL_WIDTH, dtype=np.int64)

    def _at_top(self, c: int, a) -> str:
        """c x (atom a at lane 0), computed once at the top of the shader (a depends on g only)."""
        e = substitute(self._expand(a), {v: self.g0 for v in self.frag})
        saved = self.lines, self.env, self.depth
        self.lines, self.env, self.depth = self.top, [self.env[0]], 1
        try:
            t = self.expr(e)
        finally:
            self.lines, self.env, self.depth = saved
        return t if c == 1 else f"{t} * {c}"

    def load_code(self, buf, name: str, idx: str) -> str:
        if buf.scope in ("private", "shared"):
            return f"{name}_{self.lane}[{idx}]" if self.mode == "lanes" else f"{name}[{idx}]"
        if buf is self.outputs[0]:
            raise LoweringError(f"{self.kernel.name}: reads its own output {buf.name}, which a fragment cannot")
        j = self.kernel.params.index(buf)
        fl = buf.dtype in FLOAT_TEX
        self.ld4.add("pf" if fl else "pi")     # selects of the component (the ternaries were 1.4x faster than
        # v[c] on SwiftShader; the mix form is as fast as they were: benchmarks/webgl_pick_ab.py)
        v = f"fxc_pick{'f' if fl else 'i'}(texelFetch(fxc_t{j}, fxc_at((({idx}) >> 2){self._q(j)}), 0), ({idx}) & 3)"
        return f"({v} != 0)" if buf.dtype == "bool" else v

    def _q(self, j: int, scale: int = 1) -> str:
        """The text adding parameter j's launch offset (texels x scale) to an index: "" without offsets."""
        if not self.offsets:
            return ""
        return f" + fxc_q{j}" if scale == 1 else f" + (fxc_q{j} << {scale.bit_length() - 1})"

    # -- the shader -----------------------------------------------------------------------------------------
    def kernel_text(self) -> str:
        k = self.kernel
        self.check_kernel()
        body = self.body_text()
        out = self.outputs[0]
        fl = out.dtype in FLOAT_TEX
        head = [ES_HEAD, f"// {k.name}: {k.launch}, {TEXEL_WIDTH} outputs a fragment ({self.mode})",
                f"#define FXC_W {self.width}", f"ivec2 fxc_at(int e) {{ return {self.at()}; }}",
                *self.output_decls('vec4' if fl else 'ivec4')]
        head += [f"uniform {'sampler2D' if b.dtype in FLOAT_TEX else 'isampler2D'} fxc_t{j};"
                 for j, b in enumerate(k.params) if b is not out]
        o = k.params.index(out)
        if self.offsets:        # a row launch: its texel offset per parameter; it draws its output's range only
            head += [f"uniform int fxc_q{j};" for j in range(len(k.params))]
        at = f"int(gl_FragCoord.y) * FXC_W + int(gl_FragCoord.x){' - fxc_q' + str(o) if self.offsets else ''}"
        if self.tiles:          # a part drawn as `tiles` columns of `rows` rows each (program.part_tiles)
            tiles, rows = self.tiles
            at = (f"(int(gl_FragCoord.y) % {rows}) * FXC_W + (int(gl_FragCoord.y) / {rows}) * {self.width // tiles}"
                  " + int(gl_FragCoord.x)")
        count = min(out.size, k.launch.grid[0]) if isinstance(k.launch.grid[0], int) else out.size   # the grid's
        skip = f"fxc_g < 0 || fxc_g >= {count}" if self.offsets else f"fxc_g >= {count}"
        copies = range(TEXEL_WIDTH) if self.mode == "lanes" else (None,)
        main = [f"  {VALUE[b.dtype]} {n}{'' if c is None else '_' + str(c)}[{max(b.size, 1)}];"
                for b, n in self.private.items() for c in copies]
        if self.mode == "loop":
            main.append(f"  {'float' if fl else 'int'} fxc_r[{TEXEL_WIDTH}];")
        helpers = helper_text({u for u in self.used if u in HELPERS}) + (ES_TRIG if self.trig else "")
        divs = [f"int fxc_{op}(int x, int y) {{ int s = y; {INT_DIV[op]} }}" for op in INT_DIV if op in self.used]
        kinds = {"f": ("vec4", "float", "sampler2D"), "i": ("ivec4", "int", "isampler2D")}
        ld4 = [PICK[s[1]] if s[0] == "p" else LD4.format(v=v, s=s, sampler=sampler, sel=LD4_SEL[s[-1]])
               for s in sorted(self.ld4) for v, t, sampler in [kinds[s[-1]]]]
        tail = [f"  fxc_out = {'vec4' if fl else 'ivec4'}(fxc_r[0], fxc_r[1], fxc_r[2], fxc_r[3]);"] \
            if self.mode == "loop" else []
        return "\n".join(head + [helpers, *divs, *ld4, "void main() {",
                                 f"  int fxc_g = {TEXEL_WIDTH} * ({at});", f"  if ({skip}) {{ discard; }}",
                                 *main, *self.top, body, *tail, "}", ""])
