"""Differential check mode: compiled kernels against the op registry's numpy references.

`check_graph(graph, inputs)` accepts a graph IR (before the pass pipeline) and concrete numpy inputs. It runs
the pass pipeline and fusion as `fxc.driver.build` does, evaluates every node with its numpy reference, then
compiles each fused group on its own and runs it on the reference values of its inputs. The first group
whose result differs is narrowed to its first node that differs when compiled alone (or reported as
differing only when fused). It produces a `CheckReport`.

`torch.compile(model, backend="fxc", options={"check": True})` runs this for every compiled subgraph at its
first call; a subgraph that differs runs in eager PyTorch, with a warning that names the node (or, with
`debug`, raises `CheckError`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import FxcError
from ..ops.registry import get_op
from ..relay_like.graph import Graph


class CheckError(FxcError):
    """Check mode found a compiled kernel whose result differs from the numpy reference."""


@dataclass
class CheckReport:
    ok: bool = True
    groups_checked: int = 0
    node: object = None            # the first Node that differs (None: every node alone is right)
    group: str = ""                # the fused group that differs
    detail: str = ""
    notes: list = field(default_factory=list)

    def __str__(self):
        if self.ok:
            return f"check: {self.groups_checked} fused kernel(s) match the numpy references"
        where = f"node {self.node.name!r}: {self.node!r}" if self.node is not None else \
            "no single node differs alone; the fused kernel differs"
        return (f"check: kernel [{self.group}] differs from the numpy reference; first differing {where}\n"
                f"  {self.detail}")


def _differs(actual, expected, rtol, atol) -> str | None:
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return f"shape {list(a.shape)}, reference {list(e.shape)}"
    if a.dtype != e.dtype:
        return f"dtype {a.dtype}, reference {e.dtype}"
    if a.dtype.kind in "biu":
        bad = a != e
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            return f"{int(bad.sum())} of {a.size} elements differ; first at flat index {k}: {a.flat[k]} vs {e.flat[k]}"
        return None
    fin = np.isfinite(e)
    scale = max(float(np.abs(e[fin]).max()) if fin.any() else 1.0, 1.0)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isclose(a, e, rtol=rtol, atol=atol * scale, equal_nan=True))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        return (f"{int(bad.sum())} of {a.size} elements differ; first at flat index {k}: {a.flat[k]!r} vs reference "
                f"{e.flat[k]!r} (rtol {rtol}, atol {atol * scale:.3g})")
    return None


def _run_nodes(nodes, inputs: list, outputs: list, env: dict, target: str):
    """Build the nodes as one module (their outside inputs become graph inputs) and run it on `env`."""
    from .build import build
    g = Graph()
    remap = {}
    args = []
    for v in inputs:
        if v.is_const:
            remap[v.id] = v
        else:
            remap[v.id] = g.input(v.shape, v.dtype, v.name)
            args.append(env[v.id])
    for n in nodes:
        outs = g.call(n.op, [remap[v.id] for v in n.inputs], **n.attrs)
        for o, new in zip(n.outputs, outs):
            remap[o.id] = new
    g.outputs = [remap[o.id] for o in outputs]
    module = build(g, target=target, fuse=True)
    res = module(*args)
    return res if isinstance(res, list) else [res]


def _outside_inputs(nodes) -> list:
    inside = {o.id for n in nodes for o in n.outputs}
    seen, out = set(), []
    for n in nodes:
        for v in n.inputs:
            if v.id not in inside and v.id not in seen:
                seen.add(v.id)
                out.append(v)
    return out


def check_graph(graph: Graph, inputs: list, target: str = "llvm", rtol: float = 1e-4,
                atol: float = 1e-5) -> CheckReport:
    """Compare every fused kernel of `graph` with the numpy references of its nodes.

    Parameters
    ----------
    graph : Graph
        A graph IR as the capture produces it (the pass pipeline runs here; the graph is not kept).
    inputs : list of numpy.ndarray
        One array per graph input.
    target : str
        fxc target the kernels are built for.
    rtol, atol : float
        Tolerances for floats (atol scaled by the largest finite reference magnitude).

    Returns
    -------
    CheckReport
        `ok`, and when not ok the first node that differs (`node`), its fused group and the difference.
    """
    from ..relay_like.passes.fuse_ops import fuse_ops
    from ..relay_like.pipeline import run_pipeline
    from ..target import Target
    graph = run_pipeline(graph, target=Target.parse(target))
    env = {v.id: np.asarray(a) for v, a in zip(graph.inputs, inputs)}
    for n in graph.nodes:
        args = [v.data if v.is_const else env[v.id] for v in n.inputs]
        with np.errstate(all="ignore"):
            res = get_op(n.op).reference(*args, **n.attrs)
        res = res if isinstance(res, tuple) else (res,)
        for o, r in zip(n.outputs, res):
            env[o.id] = np.ascontiguousarray(np.asarray(r).astype(np.bool_ if o.dtype == "bool" else o.dtype)) \
                .reshape(o.shape)
    report = CheckReport()
    for gr in fuse_ops(graph):
        report.groups_checked += 1
        outs = _run_nodes(gr.nodes, gr.inputs, gr.outputs, env, target)
        diff = next((d for o, a in zip(gr.outputs, outs) if (d := _differs(a, env[o.id], rtol, atol))), None)
        if diff is None:
            continue
        report.ok, report.group, report.detail = False, gr.describe(), diff
        for n in gr.nodes:   # narrow down: the first node that is wrong on its own
            alone = _run_nodes([n], _outside_inputs([n]), n.outputs, env, target)
            d = next((d for o, a in zip(n.outputs, alone) if (d := _differs(a, env[o.id], rtol, atol))), None)
            if d is not None:
                report.node, report.detail = n, d
                break
        return report
    return report
