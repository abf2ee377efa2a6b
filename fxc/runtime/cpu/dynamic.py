"""The CPU module with size symbols (a symbolic batch): `DynamicModule` binds the symbols from each call's input
shapes (runtime/symbols.py: InputError outside the compiled range) and writes their int64 values into its
workspace's header, where the kernels read them; `DynamicArtifactModule` is one loaded from a format 2 artifact.
A call binds and sizes everything before it allocates or copies anything, as the C entry does: an input whose
bytes pass the address space is an InputError (FXC_ERR_SHAPE), outputs or a workspace that do not fit an
OutOfMemoryError (FXC_ERR_NO_MEMORY). numpy and ctypes only."""
from __future__ import annotations

import ctypes
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from ...errors import InputError, OutOfMemoryError
from ..symbols import bind_symbols, dim_value
from ..tensors import allocate, check_inputs, np_dtype
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
        need = self.workspace_need(sizes)
        space = ws or self._ws
        ws = space.pointer()
        raw, _ = space._local.buf
        have = raw.nbytes - (ws - raw.ctypes.data)
        if need > have:
            new = allocate(lambda: np.empty(max(need, min(2 * have, sys.maxsize - 64)) + 64, np.uint8))
            ptr = new.ctypes.data + (-new.ctypes.data) % 64
            ctypes.memmove(ptr, ws, have)
            space._local.buf, ws = (new, ptr), ptr
        (ctypes.c_int64 * len(values)).from_address(ws + self.sym_header)[:] = values
        return ws

    def workspace_need(self, sizes: dict) -> int:
        """The workspace's bytes at these sizes: the static part and the symbolic region."""
        return self.workspace_bytes + (sum(c * math.prod(sizes[x] for x in names) for c, names in self.sym_bytes)
                                       if self.sym_bytes else self.row_bytes * sizes[self.symbols[0]["name"]])

    def check_sizes(self, sizes: dict) -> None:
        """Before anything is allocated or copied: InputError for an input past the address space (C's
        FXC_ERR_SHAPE), OutOfMemoryError for outputs and workspace past this machine's memory (FXC_ERR_NO_MEMORY)."""
        at = ", ".join(f"{k}={v}" for k, v in sizes.items())
        for s in self.inputs:
            if _bytes(s, sizes) > sys.maxsize:
                raise InputError(f"input {s.name!r} at {at} is more bytes than the address space holds")
        need = sum(_bytes(s, sizes) for s in self.outputs) + self.workspace_need(sizes)
        try:
            memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            memory = sys.maxsize
        if need > min(memory, sys.maxsize):
            raise OutOfMemoryError(f"the outputs and workspace at {at} need {need / 2**30:.1f} GiB, more than this "
                                   f"machine's {memory / 2**30:.1f} GiB of memory; call the model with smaller sizes")

    def check_inputs(self, arrays) -> list:
        return check_inputs(self.inputs, arrays, self.symbols)

    def __call__(self, *arrays):
        self.wake()
        if len(arrays) != len(self.inputs):
            self.check_inputs(arrays)               # the InputError naming the signature
        sizes = self.sizes([np.shape(a) for a in arrays])  # the range first: a 2**62-row input is never copied
        self.check_sizes(sizes)
        ins, outs = allocate(lambda: (self.check_inputs(arrays), [np.empty(shape, np_dtype(s.dtype)) for s, shape
                                                                   in zip(self.outputs, self.output_shapes(sizes))]))
        self.run_pointers([a.ctypes.data for a in ins], [o.ctypes.data for o in outs], sizes=sizes)
        return outs[0] if len(outs) == 1 else outs


def _bytes(spec, sizes: dict) -> int:
    return math.prod(dim_value(d, sizes) for d in spec.shape) * np_dtype(spec.dtype).itemsize


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
