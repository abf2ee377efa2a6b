"""Symbolic dimensions: a size known only at call time (a batch, a sequence length).

A symbol is a `Sym`, an int64 `Var` of the expression language (expr.py, which also orders sizes: `less`,
`facts`) with a stable name, so a dimension is an
int or an int64 expression of symbols (`s0`, `s0 * 128` after a reshape) and renderers see it as any other value.
`canonical` puts such an expression in one form (a sum of monomials, symbols in name order, the coefficient last),
so equal sizes are the same object (the graph IR compares dims by identity). `SymInfo` holds what is known of a
symbol: its range and a divisor. `evaluate` gives a dimension's value for given symbol values.
"""
from __future__ import annotations

from dataclasses import dataclass

from .expr import INT_MAX, Bin, Const, Expr, Sym, cast, poly, walk


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


def canonical(dim):
    """A dim in its one form: an int when it is constant, else the canonical expression (ints pass through)."""
    if not isinstance(dim, Expr):
        return int(dim)
    try:
        p = poly(dim)
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
    return {x for x in walk(dim) if isinstance(x, Sym)} if isinstance(dim, Expr) else set()


def monomial(dim):
    """(symbols as a sorted tuple, coefficient) when dim is a positive multiple of one product of symbols, else None."""
    if not isinstance(dim, Expr):
        return None
    try:
        p = poly(dim)
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


def reciprocal(n, dtype: str):
    """1 / n in float `dtype` for a count n (an int, or a symbolic size: then computed at run time)."""
    if not isinstance(n, Expr):
        return 1.0 / n
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
    p = poly(dim)
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
    """A dim as the runtime's text (fxc/runtime/symbols.py): '64', 's0', '128*s0', 's0+1', 's0*s1', 's0-1': its
    polynomial, terms of higher degree first; ValueError where it is not a polynomial of symbols (a floor division)."""
    if not isinstance(dim, Expr):
        return str(int(dim))
    out = ""
    for m, c in sorted(poly(dim).items(), key=lambda mc: (-len(mc[0]), [repr(x) for x in mc[0]])):
        if not all(isinstance(x, Sym) for x in m):
            raise ValueError(f"dimension {dim!r} is not a polynomial of size symbols")
        term = "*".join(([str(abs(c))] if abs(c) != 1 or not m else []) + [x.name for x in m])
        out += ("-" if c < 0 else "+" if out else "") + term
    return out or "0"
