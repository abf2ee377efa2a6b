"""A model's tuning tasks: its distinct workloads (fused groups after the graph passes), each with its search space,
its weight in the end-to-end latency, and the group alone as a graph of its own that a measurement builds.

Takes a graph IR (a capture's: from_torch, from_onnx, from_mxnet) and a target; produces the filled Target and the
Tasks, one per workload key (groups of equal signature share one; `count` says how many the model runs).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backends import backend_of, fill
from ..driver.groups import group_signature, group_space
from ..driver.options import pass_context
from ..driver.plan import make_plan
from ..lowering.blocks import group_symbols
from ..lowering.schedules.knobs import Space
from ..relay_like.graph import Graph, Node
from ..relay_like.pipeline import plan_graph, run_passes
from ..target import Target
from .workload import target_key, threads_of, workload_key


@dataclass
class Task:
    """One workload: a fused group on one target."""
    key: str                # workload key (fxc/tuning/workload.py)
    desc: str               # what the group computes (its ops and output types)
    graph: Graph            # the group alone: its inputs, its nodes, its outputs (what a measurement builds)
    space: Space            # its knobs and their constraints
    count: int = 1          # how many groups of the model it is
    prepack: bool = False   # it runs once per weights (not on every call)
    group: object = None    # the fused group in the model's plan (features lower it; not sent to measurements)
    threads: int = 1

    def __getstate__(self):
        return {**self.__dict__, "group": None}     # (the group reaches the whole model's graph)

    @property
    def tunable(self) -> bool:
        return any(len(k.choices) > 1 for k in self.space.knobs.values())


def group_graph(gr) -> Graph:
    """The group as a graph of its own: a graph input for each of its inputs but constants, its nodes, its outputs."""
    g = Graph()
    env = {}
    for v in gr.inputs:
        env[v.id] = v if v.is_const else g.input(v.shape, v.dtype, f"in{len(g.inputs)}")
    for n in gr.nodes:
        m = Node(n.op, [env[v.id] for v in n.inputs], dict(n.attrs), [o.type for o in n.outputs])
        g.nodes.append(m)
        for o, mo in zip(n.outputs, m.outputs):
            env[o.id] = mo
    g.outputs = [env[o.id] for o in gr.outputs]
    return g


def extract_tasks(graph, target="llvm", options: dict | None = None) -> tuple:
    """(the filled Target, [Task]) of a graph: its static fused groups, one Task per workload key, in first-run
    order. options: the build options the tuned model will be built with (winograd, blocked_layout, ...)."""
    target = fill(Target.parse(target))
    backend = backend_of(target)
    ctx = pass_context(target, dict(options or {}))
    planned = plan_graph(run_passes(graph, ctx), ctx)
    plan = make_plan(planned, backend.family, target.caps, target.kind)
    threads = threads_of(target)
    tasks: dict = {}
    for i, gr in enumerate(plan.groups):
        if group_symbols(gr):
            continue        # symbolic groups (row blocks, symbolic loops) take their defaults
        key = workload_key(group_signature(gr), target, threads)
        if key in tasks:
            tasks[key].count += 1
            continue
        tasks[key] = Task(key, gr.describe(), group_graph(gr), group_space(gr, target, threads),
                          prepack=i < len(plan.prepack), group=gr, threads=threads)
    return target, list(tasks.values())


__all__ = ["Task", "extract_tasks", "group_graph", "target_key"]
