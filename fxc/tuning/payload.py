"""A measurement batch on disk without pickle: the parent writes it into a private folder, the child reads it back.

Takes a payload dict (task: a Task whose graph is the workload alone; target, target_key, configs, params and the
other plain fields); `write(folder, payload)` writes `payload.json` (the fields, the graph as nodes, values and
attributes) and one `.npy` per constant (numpy.save of plain dtypes); `read(folder)` rebuilds the payload, its graph
with values of this process (np.load with allow_pickle=False: nothing is unpickled). An attribute of a type JSON
cannot carry exactly (anything but None, bool, int, float, str and tuples of them) is refused with an FxcError.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import FxcError
from ..relay_like.graph import Graph, Node, Value
from ..types import TensorType

PLAIN = (type(None), bool, int, float, str)


def _attr(v):
    """An attribute as JSON: tuples tagged (JSON has lists only), plain scalars as they are."""
    if isinstance(v, tuple):
        return {"tuple": [_attr(x) for x in v]}
    if type(v) in PLAIN:
        return v
    raise FxcError(f"a tuning measurement cannot carry the attribute value {v!r} ({type(v).__name__}); "
                   f"attributes are None, bool, int, float, str or tuples of them")


def _unattr(v):
    return tuple(_unattr(x) for x in v["tuple"]) if isinstance(v, dict) else v


def _graph(graph: Graph, folder: Path) -> dict:
    ids: dict = {}              # value id -> its index in the file's value list
    values: list = []

    def ref(v) -> int:
        if v.id not in ids:
            if not v.is_const:
                raise FxcError(f"value {v!r} is used before it is defined in the workload's graph")
            ids[v.id] = len(values)
            np.save(folder / f"const{ids[v.id]}.npy", np.asarray(v.data), allow_pickle=False)
            values.append({"const": True, "name": v.name})
        return ids[v.id]

    def define(v, **kind):
        ids[v.id] = len(values)
        values.append({"shape": list(v.shape), "dtype": v.dtype, "name": v.name, **kind})

    for v in graph.inputs:
        define(v, input=True, weight=v.id in graph.weights)
    nodes = []
    for n in graph.nodes:
        ins = [ref(v) for v in n.inputs]
        for o in n.outputs:
            define(o)
        nodes.append({"op": n.op, "name": n.name, "inputs": ins, "outputs": [ids[o.id] for o in n.outputs],
                      "attrs": {k: _attr(a) for k, a in n.attrs.items()}})
    return {"values": values, "nodes": nodes, "outputs": [ref(v) for v in graph.outputs]}


def _ungraph(d: dict, folder: Path) -> Graph:
    g = Graph()
    env: dict = {}
    for i, v in enumerate(d["values"]):
        if v.get("const"):
            data = np.load(folder / f"const{i}.npy", allow_pickle=False)
            env[i] = Value(TensorType(data.shape, str(data.dtype)), name=v["name"], data=data)
        elif v.get("input"):
            env[i] = g.input(tuple(v["shape"]), v["dtype"], v["name"])
            if v["weight"]:
                g.weights.add(env[i].id)
    for n in d["nodes"]:
        types = [TensorType(tuple(d["values"][o]["shape"]), d["values"][o]["dtype"]) for o in n["outputs"]]
        m = Node(n["op"], [env[i] for i in n["inputs"]], {k: _unattr(a) for k, a in n["attrs"].items()}, types,
                 n["name"])
        for o, mo in zip(n["outputs"], m.outputs):
            mo.name = d["values"][o]["name"]
            env[o] = mo
        g.nodes.append(m)
    g.outputs = [env[i] for i in d["outputs"]]
    return g


def write(folder, payload: dict) -> None:
    """The payload into `folder` (new or empty): payload.json and the graph's constants as .npy files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    task = payload["task"]
    fields = {k: v for k, v in payload.items() if k != "task"}
    fields["task"] = {"key": task.key, "desc": task.desc, "count": task.count, "prepack": task.prepack,
                      "threads": task.threads, "graph": _graph(task.graph, folder)}
    (folder / "payload.json").write_text(json.dumps(fields))


def read(folder) -> dict:
    """The payload `write` put in `folder`; its task a MeasuredTask (what a measurement needs of a Task)."""
    folder = Path(folder)
    fields = json.loads((folder / "payload.json").read_text())
    t = fields["task"]
    fields["task"] = MeasuredTask(t["key"], t["desc"], _ungraph(t["graph"], folder), t["count"], t["prepack"],
                                  t["threads"])
    return fields


class MeasuredTask:
    """The fields of a Task a measurement reads (no search space: its constraints are closures over Caps)."""

    def __init__(self, key, desc, graph, count=1, prepack=False, threads=1):
        self.key, self.desc, self.graph, self.count, self.prepack, self.threads = \
            key, desc, graph, count, prepack, threads
