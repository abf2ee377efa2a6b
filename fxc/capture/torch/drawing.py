"""fxc.explain's picture: the Drawing (fxc/deploy/picture.py) of the graphs an Explanation captured.

Takes the fused FX graphs the torch.compile backend made (recorder.Explanation.captured: eager ATen ops and calls
of FxcSubgraph partitions) and the modules those partitions built; produces one Drawing: each compiled partition a
region holding its fused groups (the module's kernel lines and launch plan), each eager op a box of the eager
colour, a partition that failed to compile a box of the eager colour with the error, the model's activations as
inputs; edges carry the FX values' types. Weights (parameters, buffers) are left out.
"""
from __future__ import annotations

import operator

import torch

from ...deploy.picture import Box, Drawing, module_drawing
from .partition import FxcSubgraph


def _type(node) -> str:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(val, torch.Tensor):
        return f"{str(val.dtype).removeprefix('torch.')}[{', '.join(str(d) for d in val.shape)}]"
    return ""


def _sources(node) -> list:
    """The FX nodes among `node`'s arguments (nested lists included)."""
    out = []
    torch.fx.node.map_arg((node.args, node.kwargs), lambda a: out.append(a))
    return out


def explanation_drawing(captured: list, failures: list, title: str) -> Drawing:
    """The Drawing of the fused graphs `captured` ((graph module, the names of its placeholders that are weights), in
    capture order); `failures`: the Explanation's failures (recorder.Failure)."""
    d = Drawing(title)
    for gi, (gm, weights) in enumerate(captured):
        prefix = f"graph {gi}: " if len(captured) > 1 else ""
        static = {n for n in gm.graph.nodes if n.op == "placeholder" and n.name in weights}
        out_of: dict = {}       # FX node -> the box that makes it
        pending: dict = {}      # placeholder -> its input box, made at its first drawn use

        def source_box(a):
            if a in out_of:
                return out_of[a]
            if a.op == "placeholder" and a not in static:
                if a not in pending:
                    pending[a] = d.add(Box("input", prefix + a.name, detail=_type(a)))
                return pending[a]
            return None

        for node in gm.graph.nodes:
            if node.op == "call_module" and isinstance(sub := gm.get_submodule(node.target), FxcSubgraph):
                out_of.update(_draw_partition(d, node, sub, failures, prefix, source_box))
            elif node.op == "call_function" and node.target is operator.getitem:
                src = node.args[0]
                made = out_of.get(src)
                out_of[node] = made[node.args[1]] if isinstance(made, list) and node.args[1] < len(made) else \
                    (made if not isinstance(made, list) else None)
            elif node.op == "call_function":
                b = out_of[node] = d.add(Box("eager", str(node.target).removeprefix("aten."), [node.name],
                                             _type(node)))
                for a in _sources(node):
                    if (s := source_box(a)) is not None and not isinstance(s, list):
                        d.connect(s, b, _type(a))
            elif node.op == "output":
                for a in _sources(node):
                    s = source_box(a)
                    if s is not None and not isinstance(s, list):
                        d.connect(s, d.add(Box("output", prefix + f"output {a.name}", detail=_type(a))), _type(a))
    return d


def _draw_partition(d: Drawing, node, sub: FxcSubgraph, failures: list, prefix: str, source_box) -> dict:
    """The partition `sub` (called at FX node `node`) drawn into d: its built module's groups in a region, or one
    eager box when it has none. Returns {node: its output boxes (a list) or its box}."""
    args = list(node.args)
    entry = next((e for e in reversed(list(sub.cache.values())) if e[0] is not None), None)
    if entry is None:       # never built, or failed: it ran in eager PyTorch
        why = next((f.error for f in failures if f.subgraph == sub.name), "not compiled")
        ops = [str(n.target).removeprefix("aten.") for n in sub.gm.graph.nodes if n.op == "call_function"]
        b = d.add(Box("eager", f"{prefix}{sub.name}: ran in eager PyTorch", ops, why[:120]))
        for a in _sources(node):
            if (s := source_box(a)) is not None and not isinstance(s, list):
                d.connect(s, b, "")
        return {node: b}
    module, tensor_pos = entry[0], entry[1]
    hidden = frozenset(slot for slot, i in enumerate(tensor_pos) if i in sub.weights)
    sources = {slot: (source_box(args[i]), _type(args[i])) for slot, i in enumerate(tensor_pos)   # (made first:
               if slot not in hidden and i < len(args) and isinstance(args[i], torch.fx.Node)}  # drawn above it)
    region = f"{prefix}{sub.name}: compiled for {module.target_spec or module.target}"
    _, ins, outs = module_drawing(module, "", d, region, hidden)
    for slot, (s, label) in sources.items():
        if s is not None and not isinstance(s, list):
            d.connect(s, ins[slot], label)
    return {node: outs if len(outs) > 1 else (outs[0] if outs else None)}
