"""Size symbols at call time: their values from the input shapes, checked against what the build assumed.
A TensorSpec dim is an int or the text of a multiple of one symbol ('s0', '4*s0'). numpy and ctypes only."""
from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .module import Module
from .tensors import check_inputs, np_dtype


@functools.lru_cache(maxsize=1024)           # (called per symbolic dim of every call)
def split_dim(dim) -> tuple:
    """A symbolic TensorSpec dim's (coefficient, symbol name): 's0' -> (1, 's0'), '4*s0' -> (4, 's0')."""
    c, _, name = dim.rpartition("*")
    return int(c or 1), name


def dim_value(dim, sizes: dict) -> int:
    """A TensorSpec dim's value: an int, or text 'name' / 'c*name' of a size symbol, given {name: value}."""
    if isinstance(dim, int):
        return dim
    c, name = split_dim(dim)
    return c * sizes[name]


def bind_symbols(specs, shapes, symbols: list) -> dict:
    """{symbol name: value} from the input shapes (symbols: dicts name, min, max, divisor), checked: every static
    dim must be the declared one; every dim with a symbol must agree with the others, be a whole multiple of its
    coefficient and lie in the symbol's range; InputError naming the input otherwise."""
    sizes: dict = {}
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
            c, name = split_dim(dim)
            if n % c:
                raise InputError(f"input {spec.name!r}: dim {dim} = {n} is not a multiple of {c}")
            if sizes.setdefault(name, n // c) != n // c:
                raise InputError(f"input {spec.name!r}: {name} = {n // c} here but {sizes[name]} in another "
                                 f"input ({list(shape)} against {list(spec.shape)})")
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


@dataclass
class DynamicModule(Module):
    """A Module with symbolic sizes: the symbols' facts (dicts name, min, max, divisor), the workspace byte offset
    of their int64 values (the kernels read them there) and the workspace bytes per unit of the symbol after
    `workspace_bytes`. Calls bind the symbols from the input shapes (InputError outside the facts)."""
    symbols: list = field(default_factory=list)
    sym_header: int = 0
    row_bytes: int = 0
    sym_bytes: list = field(default_factory=list)   # the symbolic region's size: [[coefficient, [names]], ...]

    def sizes(self, shapes) -> dict:
        return bind_symbols(self.inputs, shapes, self.symbols)

    def output_shapes(self, sizes: dict) -> list:
        return [tuple(dim_value(d, sizes) for d in s.shape) for s in self.outputs]

    def _workspace(self, sizes, ws=None) -> int:
        """The thread's workspace (`ws`, else the module's), grown (keeping its contents: the packed weights) to the
        call's size, with the symbols' values in its header."""
        if not sizes:
            raise InputError("this module has symbolic sizes: run it with the sizes of its inputs "
                             "(sizes=module.sizes(shapes))")
        values = [sizes[s["name"]] for s in self.symbols]
        need = self.workspace_bytes + (sum(c * math.prod(sizes[x] for x in names) for c, names in
                                           self.sym_bytes) if self.sym_bytes else self.row_bytes * values[0])
        space = ws or self._ws
        ws = space.pointer()
        raw, _ = space._local.buf
        have = raw.nbytes - (ws - raw.ctypes.data)
        if need > have:
            new = np.empty(max(need, 2 * have) + 64, np.uint8)
            ptr = new.ctypes.data + (-new.ctypes.data) % 64
            ctypes.memmove(ptr, ws, have)
            space._local.buf, ws = (new, ptr), ptr
        (ctypes.c_int64 * len(values)).from_address(ws + self.sym_header)[:] = values
        return ws

    def check_inputs(self, arrays) -> list:
        return check_inputs(self.inputs, arrays, self.symbols)

    def __call__(self, *arrays):
        self.wake()
        ins = self.check_inputs(arrays)
        sizes = self.sizes([np.shape(a) for a in arrays])
        outs = [np.empty(shape, np_dtype(s.dtype)) for s, shape in zip(self.outputs, self.output_shapes(sizes))]
        self.run_pointers([a.ctypes.data for a in ins], [o.ctypes.data for o in outs], sizes=sizes)
        return outs[0] if len(outs) == 1 else outs


@dataclass
class DynamicArtifactModule(DynamicModule):
    """A DynamicModule loaded from an artifact (fxc.runtime.artifact.loader.load), plus its `manifest`."""
    manifest: dict = field(default_factory=dict)

    @staticmethod
    def fields(manifest: dict) -> dict:
        """A format 2 manifest's symbols, symbol header offset and the workspace's symbolic size: `sym_bytes`
        (a sum of products of symbols), or in artifacts without it bytes per unit of the first symbol."""
        return {"symbols": [dict(s) for s in manifest["symbols"]], "sym_header": int(manifest["sym_header"]),
                "row_bytes": int(manifest["row_bytes"]),
                "sym_bytes": [[int(c), list(names)] for c, names in manifest.get("sym_bytes", [])]}


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
