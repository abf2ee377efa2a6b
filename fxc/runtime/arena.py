"""The arena of the GL and WebGPU modules (numpy only): all of a module's tensors in one storage buffer.

    place_arena(m, limit, api, device)      # sets m._in_at, m._out_at, m._const_at, m._ws_at, m.arena_bytes

Layout: HEADER bytes (word 0: the kernels' error flag), then the inputs, outputs and constants, each ALIGN-byte
aligned, then the planned workspace (and, for a symbolic module, its `row_bytes` per unit of the symbol).
runtime/opengl/module.py, runtime/browser/webgpu and the static web package (fxc/deploy/web.py) place theirs here.
"""
from __future__ import annotations

import numpy as np

from ..errors import TargetError
from .row_plan import nbytes_at

HEADER = 64                 # bytes before the first tensor in the arena (word 0: the error flag)
ALIGN = 64


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def place_arena(m, limit: int, api: str, device: str, sizes: dict | None = None) -> None:
    """Place a module's tensors in its one storage buffer (the GL and WebGPU arenas): HEADER bytes, then the inputs,
    outputs and constants aligned, then the workspace. Sets m.consts (contiguous), m._in_at, m._out_at,
    m._const_at, m._ws_at and m.arena_bytes; a TargetError when the arena exceeds the device's binding limit.
    sizes: the size symbols' values the arena holds (a module with symbolic sizes: its tensors and the workspace's
    symbolic region, `m.row_bytes` per unit of the symbol, at those sizes)."""
    m.consts = [np.ascontiguousarray(c) for c in m.consts]
    at, m._in_at, m._out_at, m._const_at = HEADER, [], [], []
    for specs, offs in ((m.inputs, m._in_at), (m.outputs, m._out_at)):
        for s in specs:
            offs.append(at)
            at = aligned(at + nbytes_at(s, sizes))
    for c in m.consts:
        m._const_at.append(at)
        at = aligned(at + c.nbytes)
    m._ws_at = at
    rows = getattr(m, "row_bytes", 0) * next(iter(sizes.values())) if sizes else 0
    m.arena_bytes = aligned(at + m.workspace_bytes + rows)
    if m.arena_bytes > limit:
        mib = 2 ** 20
        raise TargetError(f"the model needs {m.arena_bytes / mib:.1f} MiB of {api} storage but {device} binds at "
                          f"most {limit / mib:.1f} MiB in one storage buffer; use a smaller batch or the opencl target")
