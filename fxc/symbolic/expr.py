"""Scalar expressions shared by the graph IR's sizes, tensor expressions and the loop IR.

Nodes are hash-consed: building the same expression twice returns the same object, so identity is
structural equality, hashing is O(1), and renderers get common-subexpression reuse for free.
Index arithmetic is int64 throughout (no 32-bit overflow on large tensors).
Size expressions (int64 polynomials of `Sym`s, the symbolic dims) are ordered by `less`: `poly` reads one as a
polynomial and `facts` gives the symbols' known ranges; the rest of the dims' algebra is in sym.py.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import weakref

FLOATS = ("float32", "float64")
INTS = ("int8", "uint8", "int16", "int32", "int64")
DTYPES = FLOATS + INTS + ("bool",)
ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "float32": 4, "float64": 8,
            "float16": 2, "bfloat16": 2}
STORAGE_FLOATS = ("float16", "bfloat16")   # storage only: loaded, stored and cast (no arithmetic in these dtypes)

_table: "weakref.WeakValueDictionary[tuple, Expr]" = weakref.WeakValueDictionary()


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


# Vector dtypes are spelled "<scalar>x<lanes>" ("float32x16"); every scalar op applies lane-wise to them.
def vec(dtype: str, lanes: int) -> str:
    return dtype if lanes == 1 else f"{dtype}x{lanes}"


def scalar_of(dtype: str) -> str:
    return dtype.split("x")[0] if "x" in dtype else dtype


def lanes_of(dtype: str) -> int:
    return int(dtype.split("x")[1]) if "x" in dtype else 1


class Expr:
    """Base of scalar expressions; `dtype` is one of DTYPES."""

    __slots__ = ("dtype", "args", "__weakref__")

    def __new__(cls, *args):
        args = cls._normalize(*args)
        key = (cls,) + tuple((type(a), repr(a)) if isinstance(a, (bool, int, float, str)) else a for a in args)
        node = _table.get(key)
        if node is None:
            node = object.__new__(cls)
            node.args = args
            node.dtype = node._infer_dtype()
            _table[key] = node
        return node

    @staticmethod
    def _normalize(*args):
        return args

    def _infer_dtype(self) -> str:
        raise NotImplementedError

    def __getnewargs__(self):
        return self.args

    def __reduce__(self):
        return (type(self), self.args)

    # Arithmetic sugar: python numbers are promoted to constants of the other operand's dtype.
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return binary("idiv", self, o)
    def __mod__(self, o): return binary("imod", self, o)
    def __neg__(self): return unary("neg", self)

    # Order of int64 size expressions (symbolic dims), where it holds for every size >= 1 (`less`); TypeError
    # where it depends on the size. Equality stays identity (hash-consed nodes; sizes are kept canonical).
    def __lt__(self, o): return less(self, o)
    def __gt__(self, o): return less(o, self)
    def __le__(self, o): return not less(o, self)
    def __ge__(self, o): return not less(self, o)
    __hash__ = object.__hash__

    def __repr__(self):
        return f"{type(self).__name__}{self.args}"


class Const(Expr):
    __slots__ = ()

    @staticmethod
    def _normalize(value, dtype):
        sdt = scalar_of(dtype)      # a vector constant is the value in every lane
        if sdt == "bool":
            value = bool(value)
        elif sdt in INTS:
            value = int(value)
        else:
            value = float(value)
        return (value, dtype)

    def _infer_dtype(self):
        return self.args[1]

    @property
    def value(self):
        return self.args[0]

    def __repr__(self):
        return repr(self.args[0])


_var_ids = itertools.count()


class Var(Expr):
    """A named scalar (loop variable or let-bound value). Each call makes a fresh variable."""

    __slots__ = ()

    @staticmethod
    def _normalize(name, dtype="int64", uid=None):
        return (name, dtype, next(_var_ids) if uid is None else uid)

    def _infer_dtype(self):
        return self.args[1]

    @property
    def name(self):
        return f"{self.args[0]}{self.args[2]}"

    def __repr__(self):
        return self.name


BINARY = {"add", "sub", "mul", "div", "idiv", "imod", "floordiv", "floormod", "truncdiv", "truncmod",
          "max", "min", "pow", "atan2", "and", "or", "xor", "shl", "shr",
          "copysign", "hypot", "nextafter"}
COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}
UNARY = {"neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "erf", "floor", "ceil", "round",
         "trunc", "not", "isnan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
         "log2", "log10", "exp2", "expm1", "log1p", "lgamma", "erfinv", "isinf",
         "erfc", "j0", "j1", "y0", "y1", "signbit", "sigmoid"}


class Bin(Expr):
    """Binary op. idiv/imod: index division of non-negative ints; floordiv/floormod: python semantics;
    truncdiv/truncmod: C semantics (fmod for floats); and/or/xor are bitwise (logical on bool)."""

    __slots__ = ()

    @staticmethod
    def _normalize(op, a, b):
        assert op in BINARY or op in COMPARE, op
        assert a.dtype == b.dtype, (op, a.dtype, b.dtype)
        return (op, a, b)

    def _infer_dtype(self):
        return vec("bool", lanes_of(self.args[1].dtype)) if self.args[0] in COMPARE else self.args[1].dtype

    def __repr__(self):
        op, a, b = self.args
        return f"({a} {op} {b})"


class Exact(Bin):
    """A float add / sub / mul / div rounded as written: one rounding to its dtype, never contracted with another op
    into a fused multiply-add, never reassociated (renderers emit it without fast-math licence). For arithmetic that
    a definition fixes operation by operation: the int8 requantisation of ops/quant.py, whose frameworks round after
    each float32 op. Otherwise a Bin (every rewrite that takes a Bin apart and rebuilds it keeps the marker)."""

    __slots__ = ()


class Un(Expr):
    __slots__ = ()

    @staticmethod
    def _normalize(op, x):
        assert op in UNARY, op
        return (op, x)

    def _infer_dtype(self):
        return "bool" if self.args[0] in ("isnan", "isinf", "signbit") else self.args[1].dtype

    def __repr__(self):
        return f"{self.args[0]}({self.args[1]})"


class Cast(Expr):
    __slots__ = ()

    def _infer_dtype(self):
        return self.args[0]

    def __repr__(self):
        return f"{self.args[0]}({self.args[1]})"


class Select(Expr):
    __slots__ = ()

    @staticmethod
    def _normalize(cond, t, f):
        assert scalar_of(cond.dtype) == "bool" and t.dtype == f.dtype, (cond.dtype, t.dtype, f.dtype)
        return (cond, t, f)

    def _infer_dtype(self):
        return self.args[1].dtype

    def __repr__(self):
        return f"select({self.args[0]}, {self.args[1]}, {self.args[2]})"


class Load(Expr):
    """Read one element of a loop-IR buffer at a flat int64 index."""

    __slots__ = ()

    def _infer_dtype(self):
        return self.args[0].dtype

    def __repr__(self):
        return f"{self.args[0].name}[{self.args[1]}]"


class Present(Expr):
    """Whether a buffer parameter was passed (a non-null address): a kernel serving groups with and without one
    input (fxc/lowering/optional.py) reads it only where this holds."""

    __slots__ = ()

    def _infer_dtype(self):
        return "bool"

    def __repr__(self):
        return f"present({self.args[0].name})"


class CheckIndex(Expr):
    """A data-dependent index checked against a dimension of `size`, as eager PyTorch checks it: i when
    0 <= i < size (with wrap, -size <= i < 0 too, counted from the end); otherwise 0, and the kernel records
    (op, i, size) so that its call fails with fxc.errors.IndexOutOfRangeError. op: the op's number in
    fxc.errors.INDEX_OPS. Scalar int64."""

    __slots__ = ()

    @staticmethod
    def _normalize(i, size, wrap, op):
        return (cast("int64", i), int(size), bool(wrap), int(op))

    def _infer_dtype(self):
        return "int64"

    def __repr__(self):
        i, size, wrap, op = self.args
        return f"check_index({i}, {'-' if wrap else ''}{size}, op {op})"


class VecLoad(Expr):
    """`lanes` elements of a buffer at flat indices index + k * stride (stride 1: one vector load)."""

    __slots__ = ()

    @staticmethod
    def _normalize(buf, index, lanes, stride=1):
        return (buf, index, int(lanes), int(stride))

    def _infer_dtype(self):
        return vec(self.args[0].dtype, self.args[2])

    def __repr__(self):
        b, i, n, s = self.args
        return f"{b.name}[{i} : +{n}" + (f" : {s}]" if s != 1 else "]")


class Broadcast(Expr):
    """A scalar repeated in every lane."""

    __slots__ = ()

    @staticmethod
    def _normalize(x, lanes):
        return (x, int(lanes))

    def _infer_dtype(self):
        return vec(self.args[0].dtype, self.args[1])

    def __repr__(self):
        return f"broadcast({self.args[0]}, {self.args[1]})"


class Fma(Expr):
    """a * b + c with one rounding (scalar or vector floats)."""

    __slots__ = ()

    @staticmethod
    def _normalize(a, b, c):
        assert a.dtype == b.dtype == c.dtype and is_float(scalar_of(a.dtype)), (a.dtype, b.dtype, c.dtype)
        return (a, b, c)

    def _infer_dtype(self):
        return self.args[0].dtype

    def __repr__(self):
        return f"fma({self.args[0]}, {self.args[1]}, {self.args[2]})"


class Lane(Expr):
    """Element k (an int64 expression, usually an unrolled loop variable) of a vector."""

    __slots__ = ()

    @staticmethod
    def _normalize(v, k):
        return (v, as_expr(k))

    def _infer_dtype(self):
        return scalar_of(self.args[0].dtype)

    def __repr__(self):
        return f"{self.args[0]}.{self.args[1]}"


class Shuffle(Expr):
    """Lanes of two vectors of one type picked by a constant mask: k < n is lane k of the first, else lane k - n
    of the second (LLVM's shufflevector)."""

    __slots__ = ()

    @staticmethod
    def _normalize(a, b, mask):
        return (a, b, tuple(int(k) for k in mask))

    def _infer_dtype(self):
        return vec(scalar_of(self.args[0].dtype), len(self.args[2]))

    def __repr__(self):
        return f"shuffle({self.args[0]}, {self.args[1]}, {list(self.args[2])})"


class LaneReduce(Expr):
    """All lanes of a vector combined by `op` (add, max, min) into a scalar, in a tree (addition reassociates)."""

    __slots__ = ()

    def _infer_dtype(self):
        return scalar_of(self.args[1].dtype)

    def __repr__(self):
        return f"{self.args[0]}_lanes({self.args[1]})"


class PackBf16(Expr):
    """Two float32 values (or vectors) rounded to bfloat16 (nearest even) in one int32 word ("bf16x2"):
    bits(bf16(lo)) | bits(bf16(hi)) << 16, the operand layout of AVX-512 BF16's vdpbf16ps."""

    __slots__ = ()

    @staticmethod
    def _normalize(lo, hi):
        assert lo.dtype == hi.dtype and scalar_of(lo.dtype) == "float32", (lo.dtype, hi.dtype)
        return (lo, hi)

    def _infer_dtype(self):
        return vec("int32", lanes_of(self.args[0].dtype))

    def __repr__(self):
        return f"bf16x2({self.args[0]}, {self.args[1]})"


class Bf16Half(Expr):
    """The bfloat16 in half k (0: low, 1: high) of a bf16x2 word (or vector of words), as float32 (exact)."""

    __slots__ = ()

    @staticmethod
    def _normalize(word, k):
        assert scalar_of(word.dtype) == "int32" and k in (0, 1), (word.dtype, k)
        return (word, int(k))

    def _infer_dtype(self):
        return vec("float32", lanes_of(self.args[0].dtype))

    def __repr__(self):
        return f"bf16_half({self.args[0]}, {self.args[1]})"


class DotBf16(Expr):
    """acc + a.lo * b.lo + a.hi * b.hi per lane, over bf16x2 word vectors a and b (AVX-512 BF16 vdpbf16ps;
    products exact in float32, accumulated in float32)."""

    __slots__ = ()

    @staticmethod
    def _normalize(acc, a, b):
        n = lanes_of(acc.dtype)
        assert acc.dtype == vec("float32", n) and a.dtype == b.dtype == vec("int32", n), (acc.dtype, a.dtype, b.dtype)
        return (acc, a, b)

    def _infer_dtype(self):
        return self.args[0].dtype

    def __repr__(self):
        return f"dot_bf16({self.args[0]}, {self.args[1]}, {self.args[2]})"


def dot_bf16(acc: Expr, a: Expr, b: Expr) -> Expr:
    """acc + a.lo * b.lo + a.hi * b.hi: vdpbf16ps for 4, 8 or 16 lanes, two fmas over the halves otherwise."""
    if lanes_of(acc.dtype) in (4, 8, 16):
        return DotBf16(acc, a, b)
    return Fma(Bf16Half(a, 1), Bf16Half(b, 1), Fma(Bf16Half(a, 0), Bf16Half(b, 0), acc))


class DotI8(Expr):
    """acc + sum over k < 4 of a.byte[k] * b.byte[k] per lane, over int32 words of four bytes (byte k: bits 8k..8k+7)
    and an int32 accumulator (scalar or vector): b's bytes signed, a's unsigned (AVX-512 VNNI / AVX-VNNI vpdpbusd) or
    signed with signed_a (aarch64 sdot). Exact: every product and sum is an integer the int32 accumulator holds
    (wraps like it on overflow). Renderers without an instruction for it print `dot_i8_generic`."""

    __slots__ = ()

    @staticmethod
    def _normalize(acc, a, b, signed_a=False):
        n = lanes_of(acc.dtype)
        assert acc.dtype == a.dtype == b.dtype == vec("int32", n), (acc.dtype, a.dtype, b.dtype)
        return (acc, a, b, bool(signed_a))

    def _infer_dtype(self):
        return self.args[0].dtype

    def __repr__(self):
        acc, a, b, s = self.args
        return f"dot_i8({acc}, {a}{' signed' if s else ''}, {b})"


def word_byte(w: Expr, k: int, signed: bool) -> Expr:
    """Byte k of int32 word(s) w as int32: (w << (24 - 8k)) >> 24 (arithmetic) signed, (w >> 8k) & 255 unsigned."""
    dt = w.dtype
    if signed:
        return binary("shr", binary("shl", w, Const(24 - 8 * k, dt)) if k < 3 else w, Const(24, dt))
    return binary("and", binary("shr", w, Const(8 * k, dt)) if k else w, Const(255, dt))


def dot_i8_generic(acc: Expr, a: Expr, b: Expr, signed_a: bool = False) -> Expr:
    """DotI8's value in plain int32 arithmetic (shifts, masks, multiplies, adds), which every renderer prints."""
    r = acc
    for k in range(4):
        r = r + word_byte(a, k, signed_a) * word_byte(b, k, True)
    return r


def dot_i8(acc: Expr, a: Expr, b: Expr, signed_a: bool = False) -> Expr:
    """acc + the 4-way byte dot of words a and b (DotI8): the node for vectors of 4, 8 or 16 lanes (an instruction
    where the target has one, backends/llvm/render.py), the generic arithmetic otherwise."""
    if lanes_of(acc.dtype) in (4, 8, 16):
        return DotI8(acc, a, b, signed_a)
    return dot_i8_generic(acc, a, b, signed_a)


def const(value, dtype: str) -> Const:
    return Const(value, dtype)


def as_expr(x, dtype: str = "int64") -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(x, "bool" if dtype == "bool" else dtype)
    return Const(x, dtype)


def cast(dtype: str, x: Expr) -> Expr:
    x = as_expr(x, dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, Const) and dtype not in STORAGE_FLOATS:   # rounding to float16/bfloat16: the renderer's
        v = x.value
        if dtype == "bool":
            return Const(bool(v), dtype)
        if dtype in INTS:
            if isinstance(v, float) and not math.isfinite(v):
                return Cast(dtype, x)
            return Const(_wrap_int(int(v), dtype), dtype)
        return Const(float(v), dtype)
    return Cast(dtype, x)


def _wrap_int(v: int, dtype: str) -> int:
    bits = ITEMSIZE[dtype] * 8
    v &= (1 << bits) - 1
    if dtype != "uint8" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _fold_int(op, a, b):
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op in ("idiv", "floordiv") and b != 0:
        return a // b
    if op in ("imod", "floormod") and b != 0:
        return a % b
    if op == "max":
        return max(a, b)
    if op == "min":
        return min(a, b)
    return None


def binary(op: str, a, b) -> Expr:
    """Build a binary op with the simplifications every renderer wants (rules, one per line)."""
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    ca, cb = isinstance(a, Const), isinstance(b, Const)
    if a.dtype == "int64" and ca and cb:                     # c1 op c2 -> c   (index math only)
        v = _fold_int(op, a.value, b.value)
        if v is not None:
            return Const(v, "int64")
    if op in ("add", "sub") and cb and b.value == 0 and a.dtype in INTS:   # x + 0 -> x
        return a
    if op == "add" and ca and a.value == 0 and a.dtype in INTS:            # 0 + x -> x
        return b
    if op == "mul" and a.dtype in INTS:
        if cb and b.value == 1:                                            # x * 1 -> x
            return a
        if ca and a.value == 1:                                            # 1 * x -> x
            return b
        if (cb and b.value == 0) or (ca and a.value == 0):                 # x * 0 -> 0
            return Const(0, a.dtype)
    if op == "add" and _is_bin(a, "mul") and _is_bin(b, "imod"):           # (x // c) * c + x % c -> x
        q, c = a.args[1], a.args[2]
        if _is_bin(q, "idiv") and q.args[1] is b.args[1] and q.args[2] is c and b.args[2] is c:
            return b.args[1]
    if op in ("idiv",) and cb and b.value == 1:                            # x // 1 -> x
        return a
    if op in ("imod",) and cb and b.value == 1:                            # x % 1 -> 0
        return Const(0, a.dtype)
    return Bin(op, a, b)


def exact(op: str, a, b) -> Expr:
    """a op b rounded as written (Exact) where it is float arithmetic; integer arithmetic is exact anyway."""
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    if op not in ("add", "sub", "mul", "div") or scalar_of(a.dtype) not in FLOATS:
        return binary(op, a, b)
    return Exact(op, a, b)


def _is_bin(e, op: str) -> bool:
    return isinstance(e, Bin) and e.args[0] == op


def unary(op: str, x: Expr) -> Expr:
    return Un(op, x)


def compare(op: str, a, b) -> Expr:
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    return Bin(op, a, b)


def select(cond: Expr, t, f) -> Expr:
    if not isinstance(t, Expr):
        t = as_expr(t, f.dtype)
    if not isinstance(f, Expr):
        f = as_expr(f, t.dtype)
    if isinstance(cond, Const):
        return t if cond.value else f
    return Select(cond, t, f)


def maximum(a, b): return binary("max", a, b)
def minimum(a, b): return binary("min", a, b)


def children(e: Expr) -> tuple:
    return tuple(a for a in e.args if isinstance(a, Expr))


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace sub-expressions (usually Vars) by others, rebuilding only what changes."""
    memo: dict = {}

    def go(x):
        if x in mapping:
            return mapping[x]
        r = memo.get(x)
        if r is not None:
            return r
        if isinstance(x, (Const, Var)):
            r = x
        else:
            new = tuple(go(a) if isinstance(a, Expr) else a for a in x.args)
            r = x if all(n is o for n, o in zip(new, x.args)) else rebuild(x, new)
        memo[x] = r
        return r

    return go(e)


def rebuild(x: Expr, args: tuple) -> Expr:
    if isinstance(x, Exact):
        return exact(*args)
    if isinstance(x, Bin):
        return binary(*args) if args[0] in BINARY else compare(*args)
    if isinstance(x, Cast):
        return cast(args[0], args[1])
    if isinstance(x, Select):
        return select(*args)
    return type(x)(*args)


def walk(e: Expr):
    """Every distinct sub-expression of e, each once (post-order)."""
    seen, out = set(), []

    def go(x):
        if x in seen:
            return
        seen.add(x)
        for c in children(x):
            go(c)
        out.append(x)

    go(e)
    return out


# Size expressions: int64 polynomials of size symbols (symbolic dims), their one normal form and their order.

INT_MAX = 2 ** 62


class Sym(Var):
    """A named size symbol; the same name is the same object."""

    __slots__ = ()

    @staticmethod
    def _normalize(name, dtype="int64", uid="sym"):
        return (str(name), "int64", "sym")

    @property
    def name(self):
        return self.args[0]

    def __repr__(self):
        return self.args[0]


def poly(e) -> dict:
    """e as {monomial (sorted tuple of atoms): int coefficient}; raises ValueError where e is not a polynomial
    with int coefficients (then it stays an atom)."""
    if isinstance(e, int):
        return {(): e} if e else {}
    if isinstance(e, Const):
        return poly(int(e.value))
    if isinstance(e, Bin):
        op, a, b = e.args
        if op in ("add", "sub"):
            pa, pb = poly(a), poly(b)
            sign = 1 if op == "add" else -1
            for m, c in pb.items():
                pa[m] = pa.get(m, 0) + sign * c
            return {m: c for m, c in pa.items() if c}
        if op == "mul":
            pa, pb = poly(a), poly(b)
            out: dict = {}
            for ma, ca in pa.items():
                for mb, cb in pb.items():
                    m = tuple(sorted(ma + mb, key=repr))
                    out[m] = out.get(m, 0) + ca * cb
            return {m: c for m, c in out.items() if c}
        if op in ("idiv", "floordiv"):
            pa, pb = poly(a), poly(b)
            if len(pb) == 1:
                (mb, cb), = pb.items()
                out = {}
                for m, c in pa.items():
                    rest = list(m)
                    for x in mb:
                        if x not in rest:
                            raise ValueError(e)
                        rest.remove(x)
                    if c % cb:
                        raise ValueError(e)
                    out[tuple(rest)] = c // cb
                return out
        raise ValueError(e)
    if isinstance(e, Var):
        return {(e,): 1}
    raise ValueError(e)


_FACTS: contextvars.ContextVar = contextvars.ContextVar("fxc_sym_facts", default={})


@contextlib.contextmanager
def facts(symbols: dict):
    """Within it, `less` (the order of symbolic dims) knows the ranges of `symbols` ({name: SymInfo}: a graph's
    facts, which the runtime checks at every call), so a slice `[:s]` of a table of 128 rows orders s <= 128 when
    s is at most 128. Outside it a symbol is only known to be >= 1."""
    token = _FACTS.set({**_FACTS.get(), **(symbols or {})})
    try:
        yield
    finally:
        _FACTS.reset(token)


def _bounds(p: dict) -> tuple:
    """(least, greatest) value of a polynomial of symbols over their ranges (monomials grow with every symbol, so
    each takes its extreme at the range's ends; greatest may be INT_MAX ** k, which only compares)."""
    known = _FACTS.get()
    lo = hi = 0
    for m, c in p.items():
        a = b = 1
        for x in m:
            info = known.get(x.name)
            a, b = a * (info.min if info else 1), b * (info.max if info else INT_MAX)
        lo, hi = (lo + c * a, hi + c * b) if c > 0 else (lo + c * b, hi + c * a)
    return lo, hi


def less(a, b) -> bool:
    """a < b for every value of the symbols they mention in their known ranges (>= 1, or `facts`) (ints or int64
    size expressions); TypeError where that depends on the values (then a caller deciding on it cannot decide for
    every size)."""
    try:
        pa, pb = poly(a if isinstance(a, Expr) else int(a)), poly(b if isinstance(b, Expr) else int(b))
    except (ValueError, TypeError):
        raise TypeError(f"cannot order {a!r} and {b!r}") from None
    if not all(isinstance(x, Sym) for m in (*pa, *pb) for x in m):
        raise TypeError(f"cannot order {a!r} and {b!r}: only size expressions are ordered")
    d = dict(pb)
    for m, c in pa.items():
        d[m] = d.get(m, 0) - c
    lo, hi = _bounds(d)                 # b - a over the symbols' ranges
    if lo > 0:
        return True
    if hi <= 0:
        return False
    raise TypeError(f"whether {a!r} < {b!r} depends on the sizes")
