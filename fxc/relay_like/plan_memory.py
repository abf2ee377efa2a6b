"""Static memory planning: intermediate buffers whose lifetimes do not overlap share storage.

Accepts fused groups (in execution order) and the graph's outputs; returns byte offsets into one
workspace for every intermediate Value, the workspace size, and the sum of all intermediate sizes."""
from __future__ import annotations

from dataclasses import dataclass

from ..lowering.expr import ITEMSIZE

ALIGN = 64


@dataclass
class MemoryPlan:
    offsets: dict          # Value id -> byte offset in the workspace
    workspace_bytes: int
    total_bytes: int       # what it would take without sharing


def plan_memory(groups: list, graph_outputs: list) -> MemoryPlan:
    out_ids = {v.id for v in graph_outputs}
    first, last, size = {}, {}, {}
    for i, gr in enumerate(groups):
        for v in gr.outputs:
            if v.id not in out_ids:
                first[v.id] = i
                last[v.id] = i
                size[v.id] = max(v.type.numel * ITEMSIZE[v.dtype], 1)
        for v in gr.inputs:
            if v.id in first:
                last[v.id] = i
    placed = []   # (offset, end, first, last)
    offsets = {}
    for vid in sorted(size, key=lambda k: (-size[k], first[k])):
        nbytes = (size[vid] + ALIGN - 1) // ALIGN * ALIGN
        conflicts = sorted((o, e) for o, e, f, l in placed if not (l < first[vid] or last[vid] < f))
        off = 0
        for o, e in conflicts:
            if off + nbytes <= o:
                break
            off = max(off, e)
        offsets[vid] = off
        placed.append((off, off + nbytes, first[vid], last[vid]))
    ws = max((e for _, e, _, _ in placed), default=0)
    return MemoryPlan(offsets, ws, sum(size.values()))
