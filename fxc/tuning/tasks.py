"""A model's tuning tasks: its distinct workloads, each with its search space, its weight in the end-to-end latency,
and the workload alone as a graph of its own that a measurement builds.

Takes a graph IR (a capture's: from_torch, from_onnx, from_mxnet), a target and the tuned records already known (the
log's best, applied as a build would); produces the filled Target and the Tasks, one per workload key:
- graph tasks: the graph-level knobs the passes declared (a conv's Winograd form, use_winograd.py), each measured on
  the node alone (a conv and its zero pad; its weight an input marked as a weight, packed once);
- group tasks: the fused groups after the passes (groups of equal signature share one; `count` says how many the
  model runs), each measured as the group alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backends import backend_of, fill
from ..driver.groups import group_signature, group_space
from ..driver.options import pass_context
from ..driver.plan import make_plan
from ..driver.tuned import graph_key, graph_knob
from ..lowering.blocks import group_symbols
from ..lowering.schedules.knobs import Knob, Space
from ..relay_like.graph import Graph, Node, Value
from ..relay_like.pipeline import plan_graph, run_passes
from ..target import Target
from .workload import threads_of, workload_key


@dataclass
class Task:
    """One workload: a fused group (or a graph-level knob's node) on one target."""
    key: str                # workload key (fxc/tuning/workload.py)
    desc: str               # what it computes
    graph: Graph            # the workload alone (what a measurement builds)
    space: Space            # its knobs and their constraints
    count: int = 1          # how many of it the model runs
    prepack: bool = False   # it runs once per weights (not on every call)
    group: object = None    # the fused group in the model's plan (features lower it; not sent to measurements)
    threads: int = 1

    def __getstate__(self):
        """What a measurement needs (Dask pickles its tasks to a worker; a local child reads payload.py's files):
        not the group, which reaches the whole model's graph, nor the space, whose constraints are closures over the
        device's Caps."""
        return {**self.__dict__, "group": None, "space": None}

    @property
    def tunable(self) -> bool:
        return any(len(k.choices) > 1 for k in self.space.knobs.values())

    @property
    def graph_level(self) -> bool:
        return self.space.family == "graph"


def clone_graph(graph: Graph) -> Graph:
    """A copy of graph with nodes and values of its own, constants included (their data shared): the passes rewrite
    the graph they take, and a tuner builds one model, or one workload, many times. Every value gets an id of this
    process: a graph unpickled on a Dask worker carries its parent's ids, which the child's new values would
    collide with. (Iterative: deepcopy recurses once per node.)"""
    g = Graph()
    env = {}

    def const(v):
        if v.id not in env:
            env[v.id] = Value(v.type, name=v.name, data=v.data)
        return env[v.id]
    for v in graph.inputs:
        env[v.id] = g.input(v.shape, v.dtype, v.name)
        if v.id in graph.weights:
            g.weights.add(env[v.id].id)
    for n in graph.nodes:
        ins = [env[v.id] if v.id in env else const(v) for v in n.inputs]
        m = Node(n.op, ins, dict(n.attrs), [o.type for o in n.outputs], n.name)
        for o, mo in zip(n.outputs, m.outputs):
            mo.name = o.name
            env[o.id] = mo
        g.nodes.append(m)
    g.outputs = [env[v.id] if v.id in env else const(v) for v in graph.outputs]
    g.symbols = dict(graph.symbols)
    for k, v in vars(graph).items():         # what a capture adds (e.g. input_orders)
        if k not in vars(g):
            setattr(g, k, v)
    return g


def group_graph(gr) -> Graph:
    """The group as a graph of its own: a graph input for each of its inputs but constants, its nodes, its outputs."""
    g = Graph()
    env = {v.id: v if v.is_const else g.input(v.shape, v.dtype, f"in{k}") for k, v in enumerate(gr.inputs)}
    for n in gr.nodes:
        m = Node(n.op, [env[v.id] for v in n.inputs], dict(n.attrs), [o.type for o in n.outputs])
        g.nodes.append(m)
        env.update({o.id: mo for o, mo in zip(n.outputs, m.outputs)})
    g.outputs = [env[o.id] for o in gr.outputs]
    return g


def node_graph(node) -> Graph:
    """A graph-level knob's node alone: its inputs' producers that it absorbs (a zero pad) kept, its second input
    (a weight) an input marked as a weight, its other inputs plain inputs."""
    g = Graph()
    env: dict = {}

    def value(v, weight=False):
        if v.id not in env:
            p = v.node
            if p is not None and p.op == "pad" and not weight:
                m = Node("pad", [value(x) for x in p.inputs], dict(p.attrs), [o.type for o in p.outputs])
                g.nodes.append(m)
                env[v.id] = m.outputs[v.index]
            else:
                env[v.id] = v if v.is_const else g.input(v.shape, v.dtype, f"in{len(g.inputs)}")
                if weight and not v.is_const:
                    g.weights.add(env[v.id].id)
        return env[v.id]
    ins = [value(v, weight=i == 1) for i, v in enumerate(node.inputs)]
    m = Node(node.op, ins, dict(node.attrs), [o.type for o in node.outputs])
    g.nodes.append(m)
    g.outputs = list(m.outputs)
    return g


def extract_tasks(graph, target="llvm", options: dict | None = None, tuned: dict | None = None) -> tuple:
    """(the filled Target, [Task]) of a graph: its graph-level knobs' nodes, then its static fused groups, one Task
    per workload key, in first-run order. options: the build options the tuned model will be built with; tuned:
    workload key -> the best record so far (fxc/tuning/log.py best_for_target), applied as a build applies it."""
    target = fill(Target.parse(target))
    backend = backend_of(target)
    threads = threads_of(target)
    lookup = graph_knob(tuned or {}, target, threads)
    declared: dict = {}         # signature -> [node, {name: Knob}, count]

    def knob(signature, name, default, choices=(), doc="", node=None):
        entry = declared.setdefault(signature, [node, {}, 0])
        if not entry[1] or name == next(iter(entry[1])):
            entry[2] += 1       # (one more node of this signature)
        entry[1].setdefault(name, Knob(name, tuple(dict.fromkeys((default, *choices))), default, doc))
        return lookup(signature, name, default, choices, doc, node) if lookup else default

    ctx = pass_context(target, dict(options or {}), knob=knob)
    planned = plan_graph(run_passes(clone_graph(graph), ctx), ctx)     # (the passes rewrite what they take)
    plan = make_plan(planned, backend.family, target.caps, target.kind)
    tasks: dict = {}
    for sig, (node, knobs, count) in declared.items():
        if node is not None and any(len(k.choices) > 1 for k in knobs.values()):
            key = graph_key(sig, target, threads)
            tasks[key] = Task(key, f"{node.op} {node.outputs[0].type!r}: " + ", ".join(knobs), node_graph(node),
                              Space("graph", knobs), count, threads=threads)
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
