"""Render loop-IR Kernels (and the execution plan's entry function) as LLVM IR text.

Accepts Kernels from fxc.lowering and a plan (list of kernel calls over buffer slots); produces one
LLVM module. Parallel loops are outlined into `<kernel>_par<k>(i64 start, i64 end, ptr args)` and run
by `fxc_parallel_for` from the CPU runtime; vectorize loops carry LLVM loop-vectorizer metadata.
"""
from __future__ import annotations

import math

from ...errors import LoweringError
from ...lowering.loop_ir import (
    BOUND_KINDS,
    Allocate,
    Barrier,
    Buffer,
    For,
    IfThen,
    LetStmt,
    Seq,
    Stmt,
    Store,
    free_vars,
    walk_stmts,
)
from ...symbolic.expr import (
    FLOATS,
    Bf16Half,
    Bin,
    Broadcast,
    Cast,
    CheckIndex,
    Const,
    DotBf16,
    DotI8,
    Exact,
    Expr,
    Fma,
    Lane,
    LaneReduce,
    Load,
    PackBf16,
    Present,
    Select,
    Shuffle,
    Un,
    Var,
    VecLoad,
    children,
    lanes_of,
    scalar_of,
    vec,
)
from .arith import LTYPE, MTYPE, UNSIGNED, Arithmetic, float_suffix, lty
from .int8 import render_dot_i8
from .mathlib import VECTOR_MATH, VectorMath, float_literal, pack_bf16_words

FLOAT_FLAGS = "reassoc contract"

# unary math: (llvm intrinsic stem) or ("libm", name) - libm names get an "f" suffix for float32
UNARY_FN = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "sin": "llvm.sin", "cos": "llvm.cos",
            "floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc", "round": "llvm.roundeven",
            "exp2": "llvm.exp2", "log2": "llvm.log2", "log10": "llvm.log10",
            "tan": "libm:tan", "tanh": "libm:tanh", "erf": "libm:erf", "asin": "libm:asin", "acos": "libm:acos",
            "atan": "libm:atan", "sinh": "libm:sinh", "cosh": "libm:cosh", "asinh": "libm:asinh",
            "acosh": "libm:acosh", "atanh": "libm:atanh", "expm1": "libm:expm1", "log1p": "libm:log1p",
            "lgamma": "libm:lgamma", "erfc": "libm:erfc", "j0": "libm:j0", "j1": "libm:j1", "y0": "libm:y0",
            "y1": "libm:y1"}
FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
ICMP_S = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
ICMP_U = {"lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge", "eq": "eq", "ne": "ne"}



class FunctionWriter(Arithmetic):
    """Emits one LLVM function body of `module` (the ModuleWriter, module.py, that holds it); statements become
    blocks, expressions SSA values."""

    def __init__(self, module, name: str, params: list, arg_names: str):
        self.m, self.name, self.params = module, name, params
        self.lines: list = []
        self.allocas: list = []
        self.tmp = 0
        self.block = "entry"
        self.env: list = [{}]          # scopes: Expr/Var -> ssa value
        self._by_buf: dict = {}         # buffer -> the cached expressions that read it (invalidate)
        self._reads: dict = {}         # Expr -> the buffers it loads from (see invalidate)
        self.bufptr: dict = {}
        self.arg_names = arg_names

    # -- helpers ---------------------------------------------------------------------------------
    def new(self, prefix="t") -> str:
        self.tmp += 1
        return f"%{prefix}{self.tmp}"

    def label(self, prefix) -> str:
        self.tmp += 1
        return f"{prefix}{self.tmp}"

    def emit(self, line: str):
        self.lines.append("  " + line)

    def start_block(self, label: str):
        self.lines.append(f"{label}:")
        self.block = label

    def lookup(self, e):
        for scope in reversed(self.env):
            if e in scope:
                return scope[e]
        return None

    def bind(self, e, v):
        self.env[-1][e] = v
        if isinstance(e, Expr) and not isinstance(e, Var):    # LetStmt variables keep the value they were given
            for buf in self.reads(e):
                self._by_buf.setdefault(buf, []).append(e)

    def reads(self, e: Expr) -> frozenset:
        """The buffers whose contents e's value depends on (those of its loads, at any depth)."""
        r = self._reads.get(e)
        if r is None:
            r = frozenset().union(*(self.reads(c) for c in children(e)))
            if isinstance(e, (Load, VecLoad)):
                r = r | {e.args[0]}
            self._reads[e] = r
        return r

    def invalidate(self, buf: Buffer):
        """After a store to buf: forget every cached value computed from it (a load, and anything built on one;
        LetStmt variables keep the value they were given). _by_buf lists, per buffer, the expressions bound since
        its last store that read it (some perhaps forgotten already, or of a closed scope: popping them again is
        harmless), so a store costs what it forgets, not a scan of every cached value."""
        keys = self._by_buf.pop(buf, None)
        if keys:
            for scope in self.env:
                for k in keys:
                    scope.pop(k, None)

    def ptr(self, buf: Buffer) -> str:
        """Pointer of a buffer; local buffers live in this function's entry block (thread-private)."""
        p = self.bufptr.get(buf)
        if p is None:
            if buf.scope != "private":
                raise LoweringError(f"buffer {buf.name} ({buf.scope}) is not a parameter of {self.name}; the CPU "
                                    f"renderer has no work-group shared memory: lower it for a device target")
            p = f"%{buf.name}_{self.label('a')}"
            self.allocas.append(f"{p} = alloca {MTYPE[buf.dtype]}, i64 {max(buf.size, 1)}, align 64")
            self.bufptr[buf] = p
        return p

    def load_params(self, args: str):
        for k, b in enumerate(self.params):
            p = self.new("pp")
            self.emit(f"{p} = getelementptr ptr, ptr {args}, i64 {k}")
            v = self.new(b.name.replace(".", "_"))
            self.emit(f"{v} = load ptr, ptr {p}, !invariant.load !0")
            self.bufptr[b] = v

    # -- statements --------------------------------------------------------------------------------
    def stmt(self, s: Stmt):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, For):
            if s.kind in BOUND_KINDS:
                raise LoweringError(f"{self.name}: a loop bound to the device's {s.kind} (axis {s.axis}) cannot run "
                                    f"on the CPU; use kind 'parallel' (or build for target 'opencl')")
            if s.kind == "parallel":
                self.parallel(s)
            elif s.kind == "unroll" and isinstance(s.extent, int) and s.extent <= 64:
                for k in range(s.start, s.extent):      # explicit unroll: constant indices
                    self.env.append({s.var: str(k)})
                    self.stmt(s.body)
                    self.env.pop()
            else:
                self.loop(s)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, Allocate):
            self.ptr(s.buf)
            self.stmt(s.body)
        elif isinstance(s, LetStmt):
            self.bind(s.var, self.expr(s.value))
            self.stmt(s.body)
        elif isinstance(s, IfThen):
            c = self.expr(s.cond)
            lt, le, lx = self.label("then"), self.label("else"), self.label("endif")
            self.emit(f"br i1 {c}, label %{lt}, label %{le if s.orelse is not None else lx}")
            self.start_block(lt)
            self.env.append({})
            self.stmt(s.then)
            self.env.pop()
            self.emit(f"br label %{lx}")
            if s.orelse is not None:
                self.start_block(le)
                self.env.append({})
                self.stmt(s.orelse)
                self.env.pop()
                self.emit(f"br label %{lx}")
            self.start_block(lx)
        elif isinstance(s, Barrier):
            raise LoweringError(f"{self.name}: a work-group barrier has no meaning on the CPU (build for a device "
                                f"target such as 'opencl')")
        else:
            raise LoweringError(f"cannot render statement {s!r}")

    def loop(self, s: For, start: str | None = None, end: str | None = None):
        head, body, latch, exit_ = (self.label(p) for p in ("head", "body", "latch", "exit"))
        if end is None:     # an int, or an int64 expression (a data-dependent trip count)
            end = self.expr(s.extent) if isinstance(s.extent, Expr) else str(s.extent)
        if start is None:   # likewise (a tail after whole vectors of a symbolic extent)
            start = self.expr(s.start) if isinstance(s.start, Expr) else str(s.start)
        pre = self.block
        for st in walk_stmts(s.body):   # a load cached before the loop is stale from the 2nd iteration on
            if isinstance(st, Store):      # if the body stores to its buffer
                self.invalidate(st.buf)
        i, nxt = self.new("i"), self.new("inext")
        self.emit(f"br label %{head}")
        self.start_block(head)
        self.emit(f"{i} = phi i64 [ {start}, %{pre} ], [ {nxt}, %{latch} ]")
        c = self.new()
        self.emit(f"{c} = icmp slt i64 {i}, {end}")
        self.emit(f"br i1 {c}, label %{body}, label %{exit_}")
        self.start_block(body)
        self.env.append({s.var: i})
        self.stmt(s.body)
        self.env.pop()
        self.emit(f"br label %{latch}")
        self.start_block(latch)
        self.emit(f"{nxt} = add nuw nsw i64 {i}, 1")
        md = self.m.loop_md(s.kind)
        self.emit(f"br label %{head}" + (f", !llvm.loop {md}" if md else ""))
        self.start_block(exit_)

    def parallel(self, s: For):
        free = sorted(free_vars(s.body) - {s.var}, key=repr)
        if any(v.dtype != "int64" or self.lookup(v) is None for v in free):
            raise LoweringError(f"parallel loop in {self.name} uses outer variables {free} (int64 ones only)")
        fname = f"{self.name}_par{self.m.counter()}"
        sub = FunctionWriter(self.m, fname, self.params, "")
        sub.load_params("%args")
        args = "%args" if not free else self.captured(free)
        for k, v in enumerate(free):        # an outer loop's index (a row block's): passed after the parameters
            p, q, x = sub.new("cp"), sub.new("cq"), sub.new("cv")
            sub.emit(f"{p} = getelementptr ptr, ptr %args, i64 {len(self.params) + k}")
            sub.emit(f"{q} = load ptr, ptr {p}")
            sub.emit(f"{x} = ptrtoint ptr {q} to i64")
            sub.bind(v, x)
        sub.loop(For(s.var, s.extent, s.body, "serial"), start="%start", end="%end")
        self.m.functions.append(sub.finish(f"define internal void @{fname}(i64 %start, i64 %end, ptr noalias %args)"))
        end = self.expr(s.extent) if isinstance(s.extent, Expr) else str(s.extent)
        self.emit(f"call void @fxc_parallel_for(ptr @{fname}, ptr {args}, i64 {end})")

    def captured(self, free: list) -> str:
        """A copy of the parameter array with the values of `free` (int64 variables) after the parameters."""
        arr = f"%cap{self.label('')}"
        self.allocas.append(f"{arr} = alloca ptr, i64 {len(self.params) + len(free)}, align 8")
        for k, b in enumerate(self.params):
            p = self.new("cs")
            self.emit(f"{p} = getelementptr ptr, ptr {arr}, i64 {k}")
            self.emit(f"store ptr {self.bufptr[b]}, ptr {p}")
        for k, v in enumerate(free):
            p, x = self.new("cs"), self.new("ci")
            self.emit(f"{x} = inttoptr i64 {self.lookup(v)} to ptr")
            self.emit(f"{p} = getelementptr ptr, ptr {arr}, i64 {len(self.params) + k}")
            self.emit(f"store ptr {x}, ptr {p}")
        return arr

    def store(self, s: Store):
        v = self.expr(s.value)
        idx = self.expr(s.index)
        t = MTYPE[s.buf.dtype]
        if lanes_of(s.value.dtype) > 1:          # a vector stored at consecutive elements
            n, vt, align = lanes_of(s.value.dtype), lty(s.value.dtype), 1 if t == "i8" else 4   # bytes: any address
            if s.buf.dtype == "bool":            # a byte per element (a <n x i1> in memory would be packed bits)
                w, vt, align = self.new(), f"<{n} x i8>", 1
                self.emit(f"{w} = zext <{n} x i1> {v} to {vt}")
                v = w
            p = self.new("sp")
            self.emit(f"{p} = getelementptr inbounds {t}, ptr {self.ptr(s.buf)}, i64 {idx}")
            self.emit(f"store {vt} {v}, ptr {p}, align {align}")
            self.invalidate(s.buf)
            return
        if s.buf.dtype == "bool":
            w = self.new()
            self.emit(f"{w} = zext i1 {v} to i8")
            v = w
        p = self.new("sp")
        self.emit(f"{p} = getelementptr inbounds {t}, ptr {self.ptr(s.buf)}, i64 {idx}")
        self.emit(f"store {t} {v}, ptr {p}")
        self.invalidate(s.buf)

    # -- expressions ---------------------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        v = self.lookup(e)
        if v is not None:
            return v
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            raise LoweringError(f"variable {e} used outside its loop in {self.name}")
        v = self.compute(e)
        self.bind(e, v)
        return v

    def const(self, e: Const) -> str:
        n = lanes_of(e.dtype)
        if n > 1:
            one = self.const(Const(e.value, scalar_of(e.dtype)))
            if one in ("0", "false") or (scalar_of(e.dtype) in FLOATS and e.value == 0
                                         and math.copysign(1, e.value) > 0):
                return "zeroinitializer"
            return "<" + ", ".join([f"{LTYPE[scalar_of(e.dtype)]} {one}"] * n) + ">"
        if e.dtype in FLOATS:
            return float_literal(e.value, e.dtype)
        if e.dtype == "bool":
            return "true" if e.value else "false"
        return str(int(e.value))

    def compute(self, e: Expr) -> str:
        if isinstance(e, Load):
            buf, idx = e.args
            i = self.expr(idx)
            t = MTYPE[buf.dtype]
            p, v = self.new("lp"), self.new("ld")
            self.emit(f"{p} = getelementptr inbounds {t}, ptr {self.ptr(buf)}, i64 {i}")
            self.emit(f"{v} = load {t}, ptr {p}")
            if buf.dtype == "bool":
                b = self.new()
                self.emit(f"{b} = icmp ne i8 {v}, 0")
                return b
            return v
        if isinstance(e, VecLoad):
            return self.vec_load(e)
        if isinstance(e, Broadcast):
            x, n = e.args
            t, vt = LTYPE[x.dtype], lty(e.dtype)
            one, r = self.new(), self.new()
            self.emit(f"{one} = insertelement <1 x {t}> poison, {t} {self.expr(x)}, i64 0")
            self.emit(f"{r} = shufflevector <1 x {t}> {one}, <1 x {t}> poison, <{n} x i32> zeroinitializer")
            return r
        if isinstance(e, Fma):      # a schedule's multiply-add: without an FMA unit a multiply and an add (llvm.fma
            t = lty(e.dtype)        # would be a call of libm's fmaf per lane, ~50x slower in a GEMM)
            fn = "fma" if self.m.caps.fma else "fmuladd"
            return self.call(f"llvm.{fn}.{float_suffix(e.dtype)}", t, [(t, self.expr(a)) for a in e.args])
        if isinstance(e, (PackBf16, Bf16Half, DotBf16)):
            return self.bf16(e)
        if isinstance(e, DotI8):
            return render_dot_i8(self, e)
        if isinstance(e, CheckIndex):
            return self.check_index(*e.args)
        if isinstance(e, Present):
            r = self.new()
            self.emit(f"{r} = icmp ne ptr {self.ptr(e.args[0])}, null")
            return r
        if isinstance(e, LaneReduce) and e.args[0] != "add" and e.dtype == "float64" \
                and not self.m.caps.float64_minmax:        # lane by lane (Caps.float64_minmax)
            op, v = e.args
            vt, x = lty(v.dtype), self.expr(v)
            lanes = []
            for k in range(lanes_of(v.dtype)):
                lanes.append(self.new())
                self.emit(f"{lanes[-1]} = extractelement {vt} {x}, i64 {k}")
            r = lanes[0]
            for lane in lanes[1:]:
                r = self.minmax_by_select(op, "float64", r, lane)
            return r
        if isinstance(e, LaneReduce):
            op, v = e.args
            t, vt = lty(e.dtype), lty(v.dtype)
            name = {"add": "fadd", "max": "fmaximum", "min": "fminimum"}[op]
            r = self.new()
            start = f"{t} {float_literal(-0.0, e.dtype)}, " if op == "add" else ""
            flags = "reassoc " if op == "add" else ""
            fn = f"llvm.vector.reduce.{name}.{float_suffix(v.dtype)}"
            self.m.declare(fn, t, ([t] if op == "add" else []) + [vt])
            self.emit(f"{r} = call {flags}{t} @{fn}({start}{vt} {self.expr(v)})")
            return r
        if isinstance(e, Shuffle):
            a, b, mask = e.args
            t, r = lty(a.dtype), self.new()
            picks = ", ".join(f"i32 {k}" for k in mask)
            self.emit(f"{r} = shufflevector {t} {self.expr(a)}, {t} {self.expr(b)}, <{len(mask)} x i32> <{picks}>")
            return r
        if isinstance(e, Lane):
            r = self.new()
            self.emit(f"{r} = extractelement {lty(e.args[0].dtype)} {self.expr(e.args[0])}, i64 {self.expr(e.args[1])}")
            return r
        if isinstance(e, Bin):
            return self.binary(e)
        if isinstance(e, Un):
            return self.unary(e)
        if isinstance(e, Cast):
            return self.cast(e.args[0], e.args[1])
        if isinstance(e, Select):
            c, a, b = (self.expr(x) for x in e.args)
            r = self.new()
            self.emit(f"{r} = select {lty(e.args[0].dtype)} {c}, {lty(e.dtype)} {a}, {lty(e.dtype)} {b}")
            return r
        raise LoweringError(f"cannot render expression {e!r}")

    def bf16(self, e: Expr) -> str:
        """bf16x2 words (int32 holding two bfloat16): pack two float32 values, read one half, or the AVX-512 BF16
        dot product acc + a.lo * b.lo + a.hi * b.hi (vdpbf16ps)."""
        n = lanes_of(e.dtype)
        wt = lty(vec("int32", n))
        bt = f"<{2 * n} x bfloat>"
        if isinstance(e, DotBf16) and not self.m.caps.bf16_dot:     # no vdpbf16ps: the same sum by two FMAs
            acc, a, b = e.args
            return self.expr(Fma(Bf16Half(a, 1), Bf16Half(b, 1), Fma(Bf16Half(a, 0), Bf16Half(b, 0), acc)))
        if isinstance(e, DotBf16):
            acc, a, b = (self.expr(x) for x in e.args)
            ab, bb = self.new(), self.new()
            self.emit(f"{ab} = bitcast {wt} {a} to {bt}")
            self.emit(f"{bb} = bitcast {wt} {b} to {bt}")
            ft = lty(e.dtype)
            return self.call(f"llvm.x86.avx512bf16.dpbf16ps.{32 * n}", ft, [(ft, acc), (bt, ab), (bt, bb)])
        if isinstance(e, Bf16Half):
            w, k = self.expr(e.args[0]), e.args[1]
            bits, r = self.new(), self.new()
            mask = "-65536" if n == 1 else "<" + ", ".join(["i32 -65536"] * n) + ">"
            sh = "16" if n == 1 else "<" + ", ".join(["i32 16"] * n) + ">"
            self.emit(f"{bits} = shl {wt} {w}, {sh}" if k == 0 else f"{bits} = and {wt} {w}, {mask}")
            self.emit(f"{r} = bitcast {wt} {bits} to {lty(e.dtype)}")
            return r
        lo, hi = (self.expr(x) for x in e.args)
        if n == 1:      # scalar: the storage rounding, then the two halves joined
            parts = []
            for x in (self.narrow_storage("bfloat16", lo), self.narrow_storage("bfloat16", hi)):
                z = self.new()
                self.emit(f"{z} = zext i16 {x} to i32")
                parts.append(z)
            s, r = self.new(), self.new()
            self.emit(f"{s} = shl i32 {parts[1]}, 16")
            self.emit(f"{r} = or i32 {parts[0]}, {s}")
            return r
        if not self.m.caps.bf16_dot:    # no vcvtne2ps2bf16 (LLVM would call __truncsfbf2): integer rounding
            return pack_bf16_words(self, wt, lo, hi)
        ft, ht = lty(e.args[0].dtype), f"<{n} x bfloat>"
        l, h, j, r = self.new(), self.new(), self.new(), self.new()
        self.emit(f"{l} = fptrunc {ft} {lo} to {ht}")        # round to nearest even (vcvtneps2bf16)
        self.emit(f"{h} = fptrunc {ft} {hi} to {ht}")
        picks = ", ".join(f"i32 {k // 2 + (n if k % 2 else 0)}" for k in range(2 * n))
        self.emit(f"{j} = shufflevector {ht} {l}, {ht} {h}, <{2 * n} x i32> <{picks}>")
        self.emit(f"{r} = bitcast {bt} {j} to {wt}")
        return r

    def vec_load(self, e: VecLoad) -> str:
        buf, idx, n, stride = e.args
        t, i = MTYPE[buf.dtype], self.expr(idx)
        vt = f"<{n} x {t}>"                      # in memory: a bool is a byte (<n x i1> would be packed bits)
        align = 1 if t == "i8" else 4
        p = self.new("lp")
        self.emit(f"{p} = getelementptr inbounds {t}, ptr {self.ptr(buf)}, i64 {i}")
        if stride == 1:
            v = self.new("ld")
            self.emit(f"{v} = load {vt}, ptr {p}, align {align}")
        elif stride == 2 and n >= 4:             # two overlapping n-lane loads covering [0, 2n-1), a two-source shuffle
            a, b, q, v = self.new("ld"), self.new("ld"), self.new("lp"), self.new()
            self.emit(f"{a} = load {vt}, ptr {p}, align {align}")
            self.emit(f"{q} = getelementptr inbounds {t}, ptr {p}, i64 {n - 1}")
            self.emit(f"{b} = load {vt}, ptr {q}, align {align}")
            picks = ", ".join(f"i32 {2 * k if 2 * k < n else 2 * k + 1}" for k in range(n))
            self.emit(f"{v} = shufflevector {vt} {a}, {vt} {b}, <{n} x i32> <{picks}>")
        elif 1 < stride <= 4:                    # small strides: one wide load, then pick every stride-th lane
            w, v = self.new("ld"), self.new()
            wide = (n - 1) * stride + 1
            self.emit(f"{w} = load <{wide} x {t}>, ptr {p}, align {align}")
            picks = ", ".join(f"i32 {k * stride}" for k in range(n))
            self.emit(f"{v} = shufflevector <{wide} x {t}> {w}, <{wide} x {t}> poison, <{n} x i32> <{picks}>")
        else:
            v = "poison"                         # a gather of scalar loads
            for k in range(n):
                q, x, nv = self.new("lp"), self.new("ld"), self.new()
                self.emit(f"{q} = getelementptr inbounds {t}, ptr {p}, i64 {k * stride}")
                self.emit(f"{x} = load {t}, ptr {q}")
                self.emit(f"{nv} = insertelement {vt} {v}, {t} {x}, i64 {k}")
                v = nv
        if buf.dtype == "bool":
            r = self.new()
            self.emit(f"{r} = icmp ne {vt} {v}, zeroinitializer")
            return r
        return v

    def minmax_by_select(self, op: str, dt: str, x: str, y: str) -> str:
        """llvm.maximum / llvm.minimum of x and y without the intrinsic (a CPU whose LLVM cannot lower it,
        Caps.float64_minmax): the larger (smaller) by an ordered compare, of equal values the bits and-ed (or-ed: so
        max(-0, +0) is +0 and min is -0), nan when either is nan (x + y)."""
        t, it = lty(dt), lty(dt.replace("float64", "int64").replace("float32", "int32"))
        cond = lty(dt.replace(scalar_of(dt), "bool"))
        gt, pick, eq, xi, yi, both, same, eqpick, uno, nan, r = (self.new() for _ in range(11))
        self.emit(f"{gt} = fcmp {'ogt' if op == 'max' else 'olt'} {t} {x}, {y}")
        self.emit(f"{pick} = select {cond} {gt}, {t} {x}, {t} {y}")
        self.emit(f"{eq} = fcmp oeq {t} {x}, {y}")
        self.emit(f"{xi} = bitcast {t} {x} to {it}")
        self.emit(f"{yi} = bitcast {t} {y} to {it}")
        self.emit(f"{both} = {'and' if op == 'max' else 'or'} {it} {xi}, {yi}")
        self.emit(f"{same} = bitcast {it} {both} to {t}")
        self.emit(f"{eqpick} = select {cond} {eq}, {t} {same}, {t} {pick}")
        self.emit(f"{uno} = fcmp uno {t} {x}, {y}")
        self.emit(f"{nan} = fadd {t} {x}, {y}")
        self.emit(f"{r} = select {cond} {uno}, {t} {nan}, {t} {eqpick}")
        return r

    def call(self, fn: str, ret: str, args: list) -> str:
        r = self.new()
        self.m.declare(fn, ret, [t for t, _ in args])
        self.emit(f"{r} = call {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")
        return r

    def binary(self, e: Bin) -> str:
        op, a, b = e.args
        dt = a.dtype
        t = lty(dt)
        x, y = self.expr(a), self.expr(b)
        r = self.new()
        fl = scalar_of(dt) in FLOATS
        if op in FCMP:
            if fl:
                self.emit(f"{r} = fcmp {FCMP[op]} {t} {x}, {y}")
            else:
                self.emit(f"{r} = icmp {(ICMP_U if dt in UNSIGNED else ICMP_S)[op]} {t} {x}, {y}")
            return r
        if fl:
            simple = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "truncmod": "frem"}
            if op in simple:          # an Exact op rounds as written: no licence to contract or reassociate
                flags = "" if isinstance(e, Exact) else FLOAT_FLAGS + " "
                self.emit(f"{r} = {simple[op]} {flags}{t} {x}, {y}")
                return r
            if op in ("max", "min"):
                if scalar_of(dt) == "float64" and not self.m.caps.float64_minmax:
                    return self.minmax_by_select(op, dt, x, y)
                fn = f"llvm.{'maximum' if op == 'max' else 'minimum'}.{float_suffix(dt)}"
                return self.call(fn, t, [(t, x), (t, y)])
            if op == "pow":
                return self.call(f"llvm.pow.{float_suffix(dt)}", t, [(t, x), (t, y)])
            if op == "atan2":
                return self.call("atan2f" if dt == "float32" else "atan2", t, [(t, x), (t, y)])
            if op in ("hypot", "nextafter"):
                return self.call(op + ("f" if dt == "float32" else ""), t, [(t, x), (t, y)])
            if op == "copysign":
                return self.call(f"llvm.copysign.{float_suffix(dt)}", t, [(t, x), (t, y)])
            if op in ("floordiv", "truncdiv"):
                q = self.new()
                self.emit(f"{q} = fdiv {t} {x}, {y}")
                return self.call(f"llvm.{'floor' if op == 'floordiv' else 'trunc'}.{float_suffix(dt)}", t, [(t, q)])
            if op == "floormod":
                m = self.new()
                self.emit(f"{m} = frem {t} {x}, {y}")
                return self._fix_mod(m, y, t, float_=True)
            raise LoweringError(f"float {op} is not renderable")
        # integers / bool
        unsigned = dt in UNSIGNED
        simple = {"add": "add", "sub": "sub", "mul": "mul", "and": "and", "or": "or", "xor": "xor", "shl": "shl",
                  "shr": "lshr" if unsigned else "ashr", "idiv": "udiv", "imod": "urem"}
        if op in ("idiv", "imod") and dt != "int64":
            simple["idiv"], simple["imod"] = "sdiv", "srem"
        if op in simple:
            self.emit(f"{r} = {simple[op]} {t} {x}, {y}")
            return r
        if op in ("max", "min"):
            n = lanes_of(dt)
            unsigned = scalar_of(dt) in UNSIGNED
            suffix = t if n == 1 else f"v{n}{LTYPE[scalar_of(dt)]}"       # llvm.umax.v16i8
            return self.call(f"llvm.{'u' if unsigned else 's'}{op}.{suffix}", t, [(t, x), (t, y)])
        if op in ("div", "truncdiv", "floordiv", "truncmod", "floormod"):
            return self._int_div(op, x, y, t, unsigned)
        raise LoweringError(f"integer {op} is not renderable")

    def unary(self, e: Un) -> str:
        op, a = e.args
        dt = a.dtype
        t = lty(dt)
        x = self.expr(a)
        r = self.new()
        if lanes_of(dt) > 1 and scalar_of(dt) == "float32" and op in VECTOR_MATH:
            return VECTOR_MATH[op](VectorMath(self, t), x)
        if not self.m.libm and dt == "float32" and op in VECTOR_MATH:      # no libm: the vector code on one lane
            one, y = self.new(), self.new()
            self.emit(f"{one} = insertelement <1 x float> poison, float {x}, i64 0")
            v = VECTOR_MATH[op](VectorMath(self, "<1 x float>"), one)
            self.emit(f"{y} = extractelement <1 x float> {v}, i64 0")
            return y
        if lanes_of(dt) > 1 and op not in ("neg", "abs", "sqrt", "floor", "ceil", "trunc", "round"):
            raise LoweringError(f"unary {op} on vectors is not renderable")
        if op == "neg":
            self.emit(f"{r} = fneg {t} {x}" if scalar_of(dt) in FLOATS else f"{r} = sub {t} 0, {x}")
            return r
        if op == "not":
            self.emit(f"{r} = xor {t} {x}, {'true' if dt == 'bool' else -1}")
            return r
        if op == "abs":
            if scalar_of(dt) in FLOATS:
                return self.call(f"llvm.fabs.{float_suffix(dt)}", t, [(t, x)])
            if dt in UNSIGNED:
                return x
            return self.call(f"llvm.abs.{t}", t, [(t, x), ("i1", "false")])
        if op == "isnan":
            self.emit(f"{r} = fcmp uno {t} {x}, {x}")
            return r
        if op == "signbit" and scalar_of(dt) in FLOATS:
            bits, w = self.new(), 32 if dt == "float32" else 64
            self.emit(f"{bits} = bitcast {t} {x} to i{w}")
            self.emit(f"{r} = icmp slt i{w} {bits}, 0")
            return r
        if op == "isinf":
            f = self.call(f"llvm.fabs.{float_suffix(dt)}", t, [(t, x)])
            self.emit(f"{r} = fcmp oeq {t} {f}, {float_literal(math.inf, dt)}")
            return r
        if op == "sigmoid" and scalar_of(dt) in FLOATS:         # 1 / (1 + exp(-x))
            n, d = self.new(), self.new()
            self.emit(f"{n} = fneg {t} {x}")
            e = self.call(f"llvm.exp.{float_suffix(dt)}", t, [(t, n)])
            self.emit(f"{d} = fadd {t} {e}, {float_literal(1.0, dt)}")
            self.emit(f"{r} = fdiv {t} {float_literal(1.0, dt)}, {d}")
            return r
        fn = UNARY_FN.get(op)
        if fn is None or scalar_of(dt) not in FLOATS:
            raise LoweringError(f"unary {op} on {dt} is not renderable")
        if fn.startswith("libm:"):
            name = fn[5:] + ("f" if dt == "float32" else "")
            return self.call(name, t, [(t, x)])
        return self.call(f"{fn}.{float_suffix(dt)}", t, [(t, x)])

    def finish(self, header: str) -> str:
        body = ["entry:"] + ["  " + a for a in self.allocas] + self._entry_rest()
        return header + " {\n" + "\n".join(body) + "\n  ret void\n}\n"

    def _entry_rest(self):
        # first line of self.lines belongs to block "entry" until a label appears
        return self.lines
