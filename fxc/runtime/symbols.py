"""Size symbols at call time: their values from the input shapes, checked against what the build assumed.
A TensorSpec dim is an int or the text of a polynomial of size symbols with int coefficients: 's0', '4*s0', 's0+1'
(a KV cache one longer than its past), 's0*s1' (a [batch*seq, 64] view), 's0-1'. Standard library only."""
from __future__ import annotations

import functools
import re

from ..errors import InputError

_TERM = re.compile(r"([+-]?)([^+-]+)")


@functools.lru_cache(maxsize=1024)           # (called per symbolic dim of every call)
def dim_terms(dim: str) -> tuple:
    """A symbolic TensorSpec dim's terms ((coefficient, (symbol names)), ...): 's0' -> ((1, ('s0',)),),
    '4*s0+1' -> ((4, ('s0',)), (1, ())); ValueError where the text is not such a sum."""
    terms, at = [], 0
    for m in _TERM.finditer(dim):
        if m.start() != at:
            break
        at = m.end()
        c, names = -1 if m.group(1) == "-" else 1, []
        for f in m.group(2).split("*"):
            if f.isdigit():
                c *= int(f)
            elif f.isidentifier():
                names.append(f)
            else:
                raise ValueError(f"dimension {dim!r}: {f!r} is neither a number nor a symbol name")
        terms.append((c, tuple(names)))
    if at != len(dim) or not terms:
        raise ValueError(f"dimension {dim!r} is not a sum of products of symbols")
    return tuple(terms)


def split_dim(dim) -> tuple:
    """A dim that is a multiple of one symbol as (coefficient, symbol name): 's0' -> (1, 's0'), '4*s0' -> (4, 's0');
    ValueError for any other polynomial (the C entry's tables bind only those)."""
    terms = dim_terms(dim)
    if len(terms) != 1 or len(terms[0][1]) != 1 or terms[0][0] < 1:
        raise ValueError(f"dimension {dim!r} is not a multiple of one symbol")
    return terms[0][0], terms[0][1][0]


def dim_value(dim, sizes: dict) -> int:
    """A TensorSpec dim's value: an int, or the text of a polynomial of size symbols, given {name: value}."""
    if isinstance(dim, int):
        return dim
    total = 0
    for c, names in dim_terms(dim):
        for n in names:
            c *= sizes[n]
        total += c
    return total


def _solvable(dim) -> tuple | None:
    """(coefficient, symbol, constant) when dim is c*s + k for one symbol s (its value binds s), else None."""
    c, name, k = 0, None, 0
    for tc, names in dim_terms(dim):
        if not names:
            k += tc
        elif len(names) == 1 and name in (None, names[0]) and tc > 0:
            c, name = c + tc, names[0]
        else:
            return None
    return (c, name, k) if name is not None else None


def bind_symbols(specs, shapes, symbols: list) -> dict:
    """{symbol name: value} from the input shapes (symbols: dicts name, min, max, divisor), checked: every static
    dim must be the declared one; a dim c*s + k of one symbol binds s (n - k must be a whole multiple of c, and agree
    with the other inputs); every other symbolic dim (s0*s1) must equal its value at the bound sizes; every symbol
    lies in its range; InputError naming the input otherwise."""
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
            lin = _solvable(dim)
            if lin is None:
                later.append((spec, shape, dim, n))
                continue
            c, name, k = lin
            if (n - k) % c or n - k < 0:
                raise InputError(f"input {spec.name!r}: dim {dim} = {n} does not hold a whole {name} (got "
                                 f"{list(shape)} against {list(spec.shape)})")
            if sizes.setdefault(name, (n - k) // c) != (n - k) // c:
                raise InputError(f"input {spec.name!r}: {name} = {(n - k) // c} here but {sizes[name]} in another "
                                 f"input ({list(shape)} against {list(spec.shape)})")
    for spec, shape, dim, n in later:
        try:
            want = dim_value(dim, sizes)
        except KeyError as e:
            raise InputError(f"input {spec.name!r}: no input gives the size {e.args[0]} of its dim {dim}") from None
        if want != n:
            raise InputError(f"input {spec.name!r}: dim {dim} = {want} at the other inputs' sizes {sizes}, got {n} "
                             f"({list(shape)} against {list(spec.shape)})")
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
