"""Size symbols at call time: their values from the input shapes, checked against what the build assumed. A
TensorSpec dim is an int or a polynomial of symbols ('s0', '4*s0', 's0+1', 's0*s1'). Standard library only."""
from __future__ import annotations

import functools
import math

from ..errors import InputError


@functools.lru_cache(maxsize=1024)
def dim_terms(dim: str) -> tuple:
    """'4*s0+1' -> ((4, ('s0',)), (1, ())); ValueError if not a polynomial."""
    terms = []
    for t in dim.replace("-", "+-").split("+")[dim.startswith("-"):]:
        c, names = (-1, t[1:]) if t.startswith("-") else (1, t)
        names = names.split("*")
        if not all(f.isdigit() or f.isidentifier() for f in names):
            raise ValueError(f"dim {dim!r} is not a polynomial")
        for f in names:
            c *= int(f) if f.isdigit() else 1
        terms.append((c, tuple(f for f in names if not f.isdigit())))
    return tuple(terms)


def dim_value(dim, sizes: dict) -> int:
    """A TensorSpec dim's value given {name: value}."""
    if isinstance(dim, int):
        return dim
    return sum(c * math.prod(sizes[n] for n in names) for c, names in dim_terms(dim))


def bind_symbols(specs, shapes, symbols: list) -> dict:
    """{symbol name: value} from the input shapes (symbols: dicts name, min, max, divisor): a dim c*s + k binds s,
    others (s0*s1) are checked at the bound sizes, each symbol in its range; InputError naming the input."""
    sizes: dict = {}
    later = []
    for spec, shape in zip(specs, shapes):
        if len(shape) != len(spec.shape):
            raise InputError(f"input {spec.name!r}: expected {len(spec.shape)} dims {list(spec.shape)}, got "
                             f"{list(shape)}")
        for dim, n in zip(spec.shape, shape):
            if isinstance(dim, int):
                if n != dim:
                    raise InputError(f"input {spec.name!r}: expected shape {list(spec.shape)}, got {list(shape)} "
                                     f"(only the symbolic dims may vary)")
                continue
            terms = dim_terms(dim)
            k = sum(c for c, names in terms if not names)
            (c, names), *more = [t for t in terms if t[1]]
            if more or len(names) != 1 or c < 1:
                later.append((spec, shape, dim, n))
                continue
            v = (n - k) // c
            if (n - k) % c or v < 0:
                raise InputError(f"input {spec.name!r}: dim {dim} = {n} does not hold a whole {names[0]}")
            if sizes.setdefault(names[0], v) != v:
                raise InputError(f"input {spec.name!r}: {names[0]} = {v} here but {sizes[names[0]]} in another "
                                 f"input")
    for spec, shape, dim, n in later:
        want = dim_value(dim, sizes) if all(x in sizes for _, xs in dim_terms(dim) for x in xs) else "?"
        if want != n:
            raise InputError(f"input {spec.name!r}: dim {dim} is {n}, not {want} at {sizes}")
    for sym in symbols:
        v = sizes.get(sym["name"])
        if v is None:
            raise InputError(f"no input gives the size {sym['name']}")
        hi = sym.get("max", 2 ** 62)
        if not sym.get("min", 1) <= v <= hi or v % sym.get("divisor", 1):
            rng = f"[{sym.get('min', 1)}, {hi if hi < 2 ** 62 else 'inf'}]"
            raise InputError(f"{sym['name']} = {v} is outside the compiled range {rng}"
                             + (f" or not a multiple of {sym['divisor']}" if sym.get("divisor", 1) > 1 else "")
                             + "; recompile for it, or declare a range that holds it")
    return sizes


def manifest_problem(m: dict, is_int) -> tuple:
    """(what is wrong with a format 2 manifest's size symbols, '' when nothing; a test of its TensorSpec dims: an
    int (is_int), or the text 'name' / 'c*name' of one of its symbols). fxc.runtime.artifact.loader checks manifests."""
    syms = m["symbols"]
    if not isinstance(syms, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"].isidentifier()
            and is_int(s.get("min")) and is_int(s.get("max"), s.get("min", 0)) and is_int(s.get("divisor"), 1)
            for s in syms) or len({s["name"] for s in syms}) != len(syms):
        return "'symbols' is not a list of {name, min, max, divisor} with distinct names", is_int
    if syms and (m.get("format_version") == 1 or not is_int(m.get("sym_header")) or not is_int(m.get("row_bytes"))):
        return "size symbols need format version 2 and integer 'sym_header' and 'row_bytes'", is_int
    names = {s["name"] for s in syms}
    terms = m.get("sym_bytes", [])
    if not isinstance(terms, list) or not all(
            isinstance(t, list) and len(t) == 2 and is_int(t[0]) and isinstance(t[1], list) and t[1]
            and all(isinstance(x, str) and x in names for x in t[1]) for t in terms):
        return "'sym_bytes' is not a list of [coefficient, [symbol names]]", is_int

    def dim_ok(d) -> bool:
        c, _, name = d.rpartition("*") if isinstance(d, str) else ("", "", None)
        return is_int(d) or (name in names and (c == "" or (c.isdigit() and 0 < int(c) < 1 << 31)))
    return "", dim_ok
