"""A C-like renderer of scalar loop IR: the shared base of the OpenCL C, GLSL and WGSL renderers.

Takes a loop-IR Kernel whose expressions are scalar (`fxc.lowering.legalize.scalarize` first; a language with
`vector_widths` also takes the native float32 vectors `scalarize(..., keep=vector_widths)` leaves) and produces
the text of its body: statements become C statements, each distinct expression one `const` temporary
(expressions are hash-consed, so a value used twice is computed once; a store forgets the temporaries that
read its buffer). A language is a subclass: capability flags, type names, and `code_for_op`, a table from op
name to a template over the operands' C text; what a table lacks is a LoweringError naming the op, never
a wrong guess. A language with `index_type` (a 32-bit int) computes the int64 loop variables and address
arithmetic that `fxc.lowering.int_ranges.narrow_indices` proves to fit 32 bits in that type when the kernel's
index width is 32 (an operation that mixes them with 64-bit values widens them first); at width 64 only the
divisions and remainders of such addresses run in 32 bits, and only in kernels without loops inside a work-item
(one work-item per output: a 64-bit division costs several 32-bit ones; in a loop, PoCL's vectoriser loses the
addresses' pattern through the casts: ResNet-18's convolutions ran 1.6x slower).

Names: one table per kernel (`ident`) gives every thing the text declares (buffers, loop and let variables,
temporaries `t<N>`, a language's kernel-level names such as GLSL's parameter offsets `o<j>`) a name no other thing of
the kernel has: the loop IR's name where it is free, else that name with a suffix; names beginning `fxc_` are the
renderer's own (preamble, builtins) and never given out. Every declaration is recorded in its C scope (`declare`), and a
name declared again where an earlier declaration is visible, which would shadow it, is a LoweringError naming it: a
renderer bug caught at render time, never a store to the wrong place.
"""
from __future__ import annotations

import math
import struct

from ..errors import LoweringError
from ..lowering.int_ranges import narrow_indices
from ..lowering.loop_ir import (
    BOUND_KINDS,
    Allocate,
    Barrier,
    Buffer,
    For,
    IfThen,
    Kernel,
    LetStmt,
    Seq,
    Stmt,
    Store,
    stmt_exprs,
    walk_stmts,
)
from ..symbolic.expr import (
    Bf16Half,
    Bin,
    Broadcast,
    Cast,
    CheckIndex,
    Const,
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
    Un,
    Var,
    VecLoad,
    children,
    dot_i8_generic,
    lanes_of,
    scalar_of,
    walk,
)

I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1
INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "idiv": "/", "imod": "%", "and": "&", "or": "|",
         "xor": "^", "shl": "<<", "shr": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def index_exprs(body: Stmt) -> set:
    """The integer expressions that compute addresses (the indices of loads and stores, and their parts): in bounds
    by the loop IR's contract, so they cannot overflow, and a language's wrapping arithmetic is not needed there."""
    roots = []
    for st in walk_stmts(body):
        if isinstance(st, Store):
            roots.append(st.index)
        for e in stmt_exprs(st):
            roots += [x.args[1] for x in walk(e) if isinstance(x, (Load, VecLoad))]
    found: set = set()
    for r in roots:
        found.update(x for x in walk(r) if not isinstance(x, Load))
    return found


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


class CStyleRenderer:
    """Loop IR -> C-like source. Subclasses set the flags and tables below."""

    has_local = False                   # work-group shared memory (Buffer scope "shared") and barriers
    bound_index = {}                    # For kind "grid"/"thread" -> the builtin giving the index on an axis
    types: dict = {}                    # dtype -> the language's type of a value
    memory_types: dict = {}             # dtype -> its type in memory (bool is a byte)
    code_for_op: dict = {}              # op (or "op.kind", kind "f" float / "i" int / "b" bool) -> template
    index_type = None                   # the 32-bit type of int64 indices proven to fit it (None: never narrowed)
    vector_widths: tuple = ()           # lanes of the float32 vector types it renders (vector loads, lane-wise
                                        # arithmetic, stores); others must be scalarized first
    buffer_prefix = ""                  # prefixes of buffer and variable names (WGSL: loop-IR names may be keywords)
    var_prefix = ""
    exact_qualifier = ""                # declares an Exact op's temporary (a statement of its own: C contracts
                                        # only within one where FP_CONTRACT is on; opencl/render.py turns it off)

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.lines: list = []
        self.depth = 1
        self.tmp = 0
        self.env: list = [{}]           # scopes: Expr -> C text of its value
        self.scopes: list = [set()]     # the names declared in each open C scope (parallel to env)
        self.declared: set = set()      # every name declared so far, in any scope
        self.idents: dict = {}          # the name table: thing (Var, Buffer, a language's key) -> its name
        self.taken: set = set()         # the names the table has given out
        self._by_buf: dict = {}         # buffer -> the cached expressions that read it
        self.exact = False              # an Exact op was rendered
        self._reads: dict = {}
        self.private: dict = {}         # private / shared Buffers, in order of first use
        self.used: set = set()          # helper functions the code calls (the preamble defines them)
        self.index_exprs = index_exprs(kernel.body)
        self.fits = set()               # int64 address expressions and variables proven to fit index_type
        if self.index_type:
            self.fits = narrow_indices(kernel, self.index_exprs)
        self.narrow = self.fits if kernel.index_bits == 32 else set()      # ... and computed in it
        if kernel.index_bits != 32 and any(isinstance(st, For) and st.kind not in BOUND_KINDS
                                           for st in walk_stmts(kernel.body)):
            self.fits = set()           # 64-bit: 32-bit divisions only where no loop runs inside a work-item
        for key, base in self.kernel_names():
            self.declare(self.ident(key, base), top=True)
        for b in kernel.params:
            self.name_of(b)

    # -- names and scopes ------------------------------------------------------------------------------
    def kernel_names(self) -> list:
        """(key, name) of the names a language declares at the kernel's top besides its buffers (GLSL's offsets)."""
        return []

    def param_decls(self, name: str) -> tuple:
        """The names a buffer parameter called `name` declares (OpenCL: its pointer, base and offset)."""
        return (name,)

    def private_decls(self, name: str) -> tuple:
        """The names a private or shared buffer called `name` declares (WebGL's lanes mode: one copy per lane)."""
        return (name,)

    def ident(self, key, base: str, derived=lambda n: (n,)) -> str:
        """The kernel's one name of `key`: `base` (made an identifier) where neither it nor what it derives is taken,
        else base_1, base_2, ...; a base beginning `fxc_` (the renderer's names) is prefixed first."""
        n = self.idents.get(key)
        if n is None:
            base = "".join(c if c.isalnum() else "_" for c in base)
            if base.lower().startswith("fxc_") or not base or base[0].isdigit():
                base = "v" + base
            n, k = base, 0
            while any(d in self.taken for d in derived(n)):
                k += 1
                n = f"{base}_{k}"
            self.idents[key] = n
            self.taken.update(derived(n))
        return n

    def declare(self, name: str, top: bool = False) -> str:
        """Record a declaration of `name` in the current C scope (top: in the kernel's outermost scope, whose text
        comes before the body). A name declared again where an earlier declaration is visible would shadow it (the
        inner one hides the outer from what follows): a LoweringError naming it, as is a top-level name that the
        body has declared already."""
        seen = (name in self.declared or name in self.scopes[0]) if top else any(name in s for s in self.scopes)
        if seen:
            raise LoweringError(f"{self.kernel.name}: internal error: the name {name} is declared again in a scope "
                                f"that sees its first declaration ({type(self).__name__}); the kernel would read "
                                f"or write the wrong value")
        (self.scopes[0] if top else self.scopes[-1]).add(name)
        self.declared.add(name)
        return name

    def var_name(self, v: Var) -> str:
        return self.ident(v, self.var_prefix + v.name)

    def name_of(self, buf: Buffer) -> str:
        n = self.idents.get(buf)
        if n is None:
            if buf.scope in ("private", "shared"):
                if buf.scope == "shared" and not self.has_local:
                    raise LoweringError(f"{self.kernel.name}: buffer {buf.name} is work-group shared memory, "
                                        f"which {type(self).__name__} cannot express")
                n = self.private[buf] = self.ident(buf, self.buffer_prefix + buf.name, self.private_decls)
                for d in self.private_decls(n):
                    self.declare(d, top=True)
            elif buf not in self.kernel.params:
                raise LoweringError(f"buffer {buf.name} ({buf.scope}) is not a parameter of {self.kernel.name}")
            else:
                n = self.ident(buf, self.buffer_prefix + buf.name, self.param_decls)
                for d in self.param_decls(n):
                    self.declare(d, top=True)
        return n

    def emit(self, line: str):
        self.lines.append("  " * self.depth + line)

    def new(self) -> str:
        """A fresh temporary, declared in the current scope (t<N>, skipping names the table has given out)."""
        self.tmp += 1
        while f"t{self.tmp}" in self.taken:
            self.tmp += 1
        return self.declare(self.ident(("tmp", self.tmp), f"t{self.tmp}"))

    def lookup(self, e):
        for scope in reversed(self.env):
            if e in scope:
                return scope[e]
        return None

    def bind(self, e, text: str):
        self.env[-1][e] = text
        if not isinstance(e, Var):
            for buf in self.reads(e):
                self._by_buf.setdefault(buf, []).append(e)

    def reads(self, e: Expr) -> frozenset:
        r = self._reads.get(e)
        if r is None:
            r = frozenset().union(*(self.reads(c) for c in children(e)))
            if isinstance(e, (Load, VecLoad)):      # (a vector load too: a store to its buffer makes it stale)
                r = r | {e.args[0]}
            self._reads[e] = r
        return r

    def invalidate(self, buf: Buffer):
        for k in self._by_buf.pop(buf, ()):
            for scope in self.env:
                scope.pop(k, None)

    def invalidate_shared(self):
        for b in [b for b in self._by_buf if b.scope == "shared"]:
            self.invalidate(b)

    def enter(self, bind: tuple = (), declare: tuple = ()):
        """Open a scope (bind: (Var, C text) pairs visible in it; declare: the names its first lines declare)."""
        self.env.append(dict(bind))
        self.scopes.append(set())
        for n in declare:
            self.declare(n)

    def leave(self):
        self.env.pop()
        self.scopes.pop()

    def block(self, s: Stmt, bind: tuple = (), declare: tuple = ()):
        """s in a new C block and scope (bind: (Var, C text) pairs visible in it; declare: names it declares)."""
        self.enter(bind, declare)
        self.depth += 1
        self.stmt(s)
        self.depth -= 1
        self.leave()

    # -- statements ------------------------------------------------------------------------------------
    def stmt(self, s: Stmt):
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, Allocate):
            self.name_of(s.buf)
            self.stmt(s.body)
        elif isinstance(s, LetStmt):
            value = self.expr(s.value)
            v = self.declare(self.var_name(s.var))
            self.emit(f"const {self.type_of(s.var)} {v} = {value};")
            self.env[-1][s.var] = v
            self.stmt(s.body)
        elif isinstance(s, IfThen):
            self.emit(f"if ({self.expr(s.cond)}) {{")
            self.block(s.then)
            if s.orelse is not None:
                self.emit("} else {")
                self.block(s.orelse)
            self.emit("}")
        elif isinstance(s, Barrier):
            if not self.has_local:
                raise LoweringError(f"{self.kernel.name}: {type(self).__name__} has no work-group barrier")
            self.invalidate_shared()
            self.emit(self.barrier())
        else:
            raise LoweringError(f"cannot render statement {s!r}")

    def loop(self, s: For):
        for st in walk_stmts(s.body):      # a value cached before the loop is stale from the 2nd iteration on
            if isinstance(st, Store):       # if the body stores to its buffer
                self.invalidate(st.buf)
            elif isinstance(st, Barrier):
                self.invalidate_shared()
        v = self.var_name(s.var)
        if s.kind in BOUND_KINDS:          # one iteration per work-group / work-item: the launch runs the loop
            fn = self.bound_index.get(s.kind)
            if fn is None:
                raise LoweringError(f"{self.kernel.name}: {type(self).__name__} cannot bind a loop to {s.kind}")
            self.emit("{")
            self.depth += 1
            t = self.type_of(s.var)
            self.emit(f"const {t} {v} = ({t}){fn}({s.axis});")
            self.depth -= 1
            self.block(s.body, ((s.var, v),), (v,))
            self.emit("}")
            return
        end = self.expr(s.extent) if isinstance(s.extent, Expr) else str(s.extent)
        if s.kind == "unroll":
            self.emit("#pragma unroll")
        self.emit(f"for ({self.type_of(s.var)} {v} = {s.start}; {v} < {end}; ++{v}) {{")
        self.block(s.body, ((s.var, v),), (v,))
        self.emit("}")

    def store(self, s: Store):
        n = lanes_of(s.value.dtype)
        if n > 1 and not (self.is_vector(s.value.dtype) and s.buf.dtype == "float32"):
            raise LoweringError(f"{self.kernel.name}: vector store to {s.buf.name}; scalarize the kernel first")
        value, idx = self.expr(s.value), self.expr(s.index)
        if n > 1:
            self.emit(self.vstore_code(self.name_of(s.buf), idx, value, n) + ";")
        else:
            self.emit(self.store_code(s.buf, self.name_of(s.buf), idx, value) + ";")
        self.invalidate(s.buf)

    # -- expressions -----------------------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        v = self.lookup(e)
        if v is not None:
            return v
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            raise LoweringError(f"variable {e} used outside its loop in {self.kernel.name}")
        if lanes_of(e.dtype) > 1 and not self.is_vector(e.dtype):
            raise LoweringError(f"{self.kernel.name}: vector expression {e!r}; scalarize the kernel first")
        code = self.compute(e)
        t = self.new()
        self.exact = self.exact or isinstance(e, Exact)
        exact = self.exact_qualifier if isinstance(e, Exact) else ""
        self.emit(f"{exact}const {self.type_of(e)} {t} = {code};")
        self.bind(e, t)
        return t

    def is_vector(self, dtype: str) -> bool:
        """A float32 vector type of this language."""
        return scalar_of(dtype) == "float32" and lanes_of(dtype) in self.vector_widths

    def const(self, e: Const) -> str:
        dt, v = e.dtype, e.value
        if lanes_of(dt) > 1:
            return f"(({self.type_of(e)})({self.float_const(float(v), scalar_of(dt))}))"
        if dt == "bool":
            return "true" if v else "false"
        if e in self.narrow:
            return self.int_const(int(v), "int32")
        if dt in ("float32", "float64", "float16", "bfloat16"):
            return self.float_const(float(v), dt)
        return self.int_const(int(v), dt)

    def float_const(self, v: float, dt: str) -> str:
        if math.isnan(v):
            return self.nan(dt)
        if math.isinf(v):
            return ("-" if v < 0 else "") + self.inf(dt)
        if dt == "float64":
            return f"{v.hex()}"
        f = struct.unpack("f", struct.pack("f", v))[0]       # the float32 the value rounds to, exactly
        return f"{f.hex()}f"

    def compute(self, e: Expr) -> str:
        if isinstance(e, VecLoad):
            buf, idx, n, stride = e.args
            if stride != 1 or buf.dtype != "float32":
                raise LoweringError(f"{self.kernel.name}: strided or non-float32 vector load {e!r}; scalarize first")
            return self.vload_code(self.name_of(buf), self.expr(idx), n)
        if isinstance(e, Broadcast):
            return f"(({self.type_of(e)})({self.expr(e.args[0])}))"
        if isinstance(e, Lane):
            return self.lane_code(self.expr(e.args[0]), e.args[1].value)
        if isinstance(e, LaneReduce):
            op, v = e.args
            x = self.expr(v)
            parts = [self.lane_code(x, k) for k in range(lanes_of(v.dtype))]
            while len(parts) > 1:           # a tree, as legalize.scalarize takes it apart
                parts = [self.op_code(op, e.dtype, parts[k], parts[k + 1]) if k + 1 < len(parts) else parts[k]
                         for k in range(0, len(parts), 2)]
            return parts[0]
        if isinstance(e, Load):
            buf, idx = e.args
            return self.load_code(buf, self.name_of(buf), self.expr(idx))
        if isinstance(e, Bin):
            op, a, b = e.args
            x, y = self.operands(e, a, b)
            if op in ("idiv", "imod") and e not in self.narrow and {e, a, b} <= self.fits:    # 32-bit division
                return f"(({self.types[e.dtype]})(({self.index_type}){x} {INFIX[op]} ({self.index_type}){y}))"
            if (e in self.index_exprs or e in self.narrow) and op in ("add", "sub", "mul"):   # addresses never
                return f"({x} {INFIX[op]} {y})"        # overflow: plain C (the compiler may then vectorise)
            return self.op_code(op, a.dtype, x, y)
        if isinstance(e, Un):
            op, a = e.args
            return self.op_code(op, a.dtype, *self.operands(e, a))
        if isinstance(e, Cast):
            x = self.expr(e.args[1])
            if e in self.narrow and e.args[1].dtype not in ("float32", "float64", "float16", "bfloat16"):
                return f"(({self.index_type}){x})"
            return self.cast_code(e.args[1].dtype, e.args[0], x)
        if isinstance(e, Select):
            c, a, b = self.operands(e, *e.args)
            return f"({c} ? {a} : {b})"
        if isinstance(e, Fma):
            return self.op_code("fma", e.dtype, *(self.expr(a) for a in e.args))
        if isinstance(e, Present):
            return f"({self.name_of(e.args[0])} != 0)"
        if isinstance(e, PackBf16):
            return self.op_code("pack_bf16", "float32", *(self.expr(a) for a in e.args))
        if isinstance(e, Bf16Half):
            return self.op_code(f"bf16_half{e.args[1]}", "int32", self.expr(e.args[0]))
        if isinstance(e, DotI8):        # the 4-way byte dot in shifts, masks, multiplies and adds
            return self.expr(dot_i8_generic(*e.args))
        if isinstance(e, CheckIndex):
            i, size, wrap, op = e.args
            return self.op_code("check_index", "int64", self.expr(i), str(size), str(int(wrap)), str(op))
        raise LoweringError(f"{type(self).__name__} cannot render expression {e!r}")

    def type_of(self, e) -> str:
        """The language's type of an expression's value (index_type where it is narrowed)."""
        if lanes_of(e.dtype) > 1:
            return self.vector_type(scalar_of(e.dtype), lanes_of(e.dtype))
        return self.index_type if e in self.narrow else self.types[e.dtype]

    def operands(self, e: Expr, *args) -> list:
        """The C text of e's operands; narrowed ones widened to int64 where e or another operand is 64-bit (C's
        overloaded builtins such as max(int, long) would be ambiguous)."""
        texts = [self.expr(a) for a in args]
        wide = (e.dtype == "int64" and e not in self.narrow) or any(
            a.dtype == "int64" and a not in self.narrow for a in args)
        if not (self.narrow and wide):
            return texts
        return [f"(({self.types['int64']}){t})" if a in self.narrow else t for a, t in zip(args, texts)]

    def op_code(self, op: str, dtype: str, *args: str) -> str:
        dtype = scalar_of(dtype)            # a vector's ops are its lanes' (lane-wise in the language)
        kind = "f" if dtype in ("float32", "float64", "float16", "bfloat16") else "b" if dtype == "bool" else "i"
        t = self.code_for_op.get(f"{op}.{kind}", self.code_for_op.get(op))
        if t is None and op in INFIX:
            t = "({0} " + INFIX[op] + " {1})"
        if t is None:
            why = (f": fxc evaluates special functions in float64 whatever the tensor's dtype, and "
                   f"{type(self).__name__} has {op} in no float type it can use for that") if dtype == "float64" else ""
            raise LoweringError(f"{type(self).__name__} has no {op} on {dtype} (kernel {self.kernel.name}){why}")
        if callable(t):
            return t(self, dtype, *args)
        return t.format(*args, T=self.types[dtype])

    # -- what a language defines -----------------------------------------------------------------------
    def int_const(self, v: int, dt: str) -> str:
        return str(v)

    def nan(self, dt: str) -> str:
        return "NAN"

    def inf(self, dt: str) -> str:
        return "INFINITY"

    def barrier(self) -> str:
        raise LoweringError(f"{type(self).__name__} has no barrier")

    def load_code(self, buf: Buffer, name: str, idx: str) -> str:
        return f"{name}[{idx}]"

    def vector_type(self, dtype: str, lanes: int) -> str:
        raise LoweringError(f"{type(self).__name__} has no vector types")

    def vload_code(self, name: str, idx: str, lanes: int) -> str:
        raise LoweringError(f"{type(self).__name__} has no vector loads")

    def vstore_code(self, name: str, idx: str, value: str, lanes: int) -> str:
        raise LoweringError(f"{type(self).__name__} has no vector stores")

    def lane_code(self, vector: str, k: int) -> str:
        raise LoweringError(f"{type(self).__name__} has no vector lanes")

    def store_code(self, buf: Buffer, name: str, idx: str, value: str) -> str:
        return f"{name}[{idx}] = {value}"

    def cast_code(self, fr: str, to: str, x: str) -> str:
        return f"(({self.types[to]}){x})"

    def body_text(self) -> str:
        """Render the kernel's body; returns its statements' text (declarations of private memory first)."""
        self.stmt(self.kernel.body)
        return "\n".join(self.lines)
