"""The CPU module with size symbols (a symbolic batch): `DynamicModule` binds the symbols from each call's input
shapes (runtime/symbols.py: InputError outside the compiled range) and writes their int64 values into its
workspace's header, where the kernels read them; `DynamicArtifactModule` is one loaded from a format 2 artifact.
numpy and ctypes only."""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field

import numpy as np

from ...errors import InputError
from ..symbols import bind_symbols, dim_value
from ..tensors import check_inputs, np_dtype
from .module import Module


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
