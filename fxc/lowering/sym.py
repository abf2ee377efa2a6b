"""Symbolic dimensions: a size known only at call time (a batch, a sequence length).

A symbol is a `Sym`, an int64 `Var` of the expression language (expr.py) with a stable name, so a dimension is an
int or an int64 expression of symbols (`s0`, `s0 * 128` after a reshape) and renderers see it as any other value.
`canonical` puts such an expression in one form (a sum of monomials, symbols in name order, the coefficient last),
so equal sizes are the same object (the graph IR compares dims by identity). `SymInfo` holds what is known of a
symbol: its range and a divisor. `evaluate` gives a dimension's value for given symbol values.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

from .expr import Bin, Const, Expr, Var

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


@dataclass(frozen=True)
class SymInfo:
    """What is known of a symbol: min <= value <= max, and value % divisor == 0."""
    name: str
    min: int = 1
    max: int = INT_MAX
    divisor: int = 1

    def check(self, value: int) -> str:
        """'' when value satisfies the facts, else why not."""
        if not self.min <= value <= self.max:
            hi = "" if self.max >= INT_MAX else f" {self.max}"
            return f"{self.name} = {value} is outside its range [{self.min},{hi or ' inf'}]"
        if value % self.divisor:
            return f"{self.name} = {value} is not a multiple of {self.divisor}"
        return ""


def is_static(dim) -> bool:
    return not isinstance(dim, Expr)


def symbolic(shape) -> bool:
    """Whether any dim of a shape is symbolic."""
    return any(isinstance(d, Expr) for d in shape)


def _poly(e) -> dict:
    """e as {monomial (sorted tuple of atoms): int coefficient}; raises ValueError where e is not a polynomial
    with int coefficients (then it stays an atom)."""
    if isinstance(e, int):
        return {(): e} if e else {}
    if isinstance(e, Const):
        return _poly(int(e.value))
    if isinstance(e, Bin):
        op, a, b = e.args
        if op in ("add", "sub"):
            pa, pb = _poly(a), _poly(b)
            sign = 1 if op == "add" else -1
            for m, c in pb.items():
                pa[m] = pa.get(m, 0) + sign * c
            return {m: c for m, c in pa.items() if c}
        if op == "mul":
            pa, pb = _poly(a), _poly(b)
            out: dict = {}
            for ma, ca in pa.items():
                for mb, cb in pb.items():
                    m = tuple(sorted(ma + mb, key=repr))
                    out[m] = out.get(m, 0) + ca * cb
            return {m: c for m, c in out.items() if c}
        if op in ("idiv", "floordiv"):
            pa, pb = _poly(a), _poly(b)
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


def canonical(dim):
    """A dim in its one form: an int when it is constant, else the canonical expression (ints pass through)."""
    if not isinstance(dim, Expr):
        return int(dim)
    try:
        p = _poly(dim)
    except ValueError:
        return dim
    out = None
    for m in sorted(p, key=lambda m: (len(m), repr(m))):
        term = None
        for x in m:
            term = x if term is None else Bin("mul", term, x)
        c = p[m]
        term = Const(c, "int64") if term is None else term if c == 1 else Bin("mul", term, Const(c, "int64"))
        out = term if out is None else Bin("add", out, term)
    if out is None:
        return 0
    return int(out.value) if isinstance(out, Const) else out


def symbols_of(dim) -> set:
    """The symbols a dim mentions."""
    from .expr import walk
    return {x for x in walk(dim) if isinstance(x, Sym)} if isinstance(dim, Expr) else set()


def monomial(dim):
    """(symbols as a sorted tuple, coefficient) when dim is a positive multiple of one product of symbols, else None."""
    if not isinstance(dim, Expr):
        return None
    try:
        p = _poly(dim)
    except ValueError:
        return None
    if len(p) != 1:
        return None
    (m, c), = p.items()
    return (tuple(sorted(m, key=repr)), c) if c > 0 and all(isinstance(x, Sym) for x in m) else None


def linear(dim):
    """(symbol, coefficient) when dim is coefficient * symbol (coefficient an int >= 1), else None."""
    mono = monomial(dim)
    return (mono[0][0], mono[1]) if mono is not None and len(mono[0]) == 1 else None


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


def _bounds(poly: dict) -> tuple:
    """(least, greatest) value of a polynomial of symbols over their ranges (monomials grow with every symbol, so
    each takes its extreme at the range's ends; greatest may be INT_MAX ** k, which only compares)."""
    known = _FACTS.get()
    lo = hi = 0
    for m, c in poly.items():
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
        pa, pb = _poly(a if isinstance(a, Expr) else int(a)), _poly(b if isinstance(b, Expr) else int(b))
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


def reciprocal(n, dtype: str):
    """1 / n in float `dtype` for a count n (an int, or a symbolic size: then computed at run time)."""
    if not isinstance(n, Expr):
        return 1.0 / n
    from .expr import cast
    return Const(1.0, dtype) / cast(dtype, n)


def possibly(test) -> bool:
    """test() (a decision on sizes, e.g. whether to run a loop in parallel), or True where it depends on the
    sizes of symbolic dims: for choices that are right either way and only cost speed."""
    try:
        return bool(test())
    except TypeError:
        return True


def evaluate(dim, values: dict) -> int:
    """The int value of a dim given {symbol name: int}."""
    if not isinstance(dim, Expr):
        return int(dim)
    p = _poly(dim)
    total = 0
    for m, c in p.items():
        for x in m:
            c *= values[x.name]
        total += c
    return total


def substitute_attr(v, env: dict):
    """An op attribute (ints, tuples, strings) with its symbolic ints evaluated for env {name: int}."""
    if isinstance(v, Expr):
        return evaluate(v, env)
    if isinstance(v, tuple):
        return tuple(substitute_attr(x, env) for x in v)
    return v


def dim_text(dim) -> str:
    """A dim as the runtime's text: '64', 's0', '128*s0' (coefficient * one symbol; the runtime evaluates it)."""
    if not isinstance(dim, Expr):
        return str(int(dim))
    lin = linear(dim)
    if lin is None:
        raise ValueError(f"dimension {dim!r} is not a multiple of one symbol")
    s, c = lin
    return s.name if c == 1 else f"{c}*{s.name}"
