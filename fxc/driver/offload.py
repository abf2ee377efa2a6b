"""The offload cost choice (docs/byoc.md): an external library's match against fxc's own kernels, timed on the
target's device at build, cached per workload and device.

    cost = offload_cost(target, build)      # (library, nodes, weights) -> (library seconds, fxc seconds)

Each side is the match alone as a graph (its inputs random, its constants kept, its weight inputs weights: held
on the device between calls, as in the model), built for the target with the
library forced (offload="always") and without it, and called on the device: the time is the least of ROUNDS calls,
the two sides called in turn (a passing load weighs on both alike), after a warm-up (the library's first call
compiles its kernels). Both sides move the same inputs and outputs. The figures are kept in the cache folder's
offload.json (key: library, ops, attributes, shapes, device and driver), so a later build of the same workload on
the same device measures nothing.
"""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

from ..relay_like.graph import Graph
from ..runtime.store import atomic_write, cache_dir

ROUNDS = 10


def _device_key(target) -> str:
    info = getattr(target.device, "info", None) or {}
    return "|".join(str(info.get(k, "")) for k in ("name", "platform", "driver", "version")) or str(target)


def workload_key(library: str, nodes: list, target) -> str:
    ops = ";".join(f"{n.op}{sorted(n.attrs.items())}{[(v.shape, v.dtype) for v in n.inputs]}" for n in nodes)
    return f"{library}|{ops}|{target.kind}|{_device_key(target)}"


def _alone(nodes: list, weights: set) -> Graph:
    """The match as a graph of its own: its non-constant inputs made graph inputs, those whose ids are in weights
    (the model graph's) its weights."""
    g, env = Graph(), {}
    for n in nodes:
        ins = []
        for v in n.inputs:
            if v.id not in env:
                env[v.id] = v if v.is_const else g.input(v.shape, v.dtype)
                if v.id in weights:
                    g.weights.add(env[v.id].id)
            ins.append(env[v.id])
        for o, new in zip(n.outputs, g.call(n.op, ins, **n.attrs)):
            env[o.id] = new
    g.outputs = [env[o.id] for o in nodes[-1].outputs]
    return g


def _race(modules: list, arrays) -> tuple:
    """The least seconds of a call of each module, over ROUNDS rounds that call each in turn (so a load that
    comes and goes on the host weighs on both alike), after a warm-up call of each."""
    best = [float("inf")] * len(modules)
    for m in modules:
        m(*arrays)                      # (the library's kernels compiled, the weights uploaded)
    for _ in range(ROUNDS):
        for i, m in enumerate(modules):
            t0 = time.perf_counter()
            m(*arrays)
            best[i] = min(best[i], time.perf_counter() - t0)
    return tuple(best)


def _load(path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def offload_cost(target, build):
    """(library, nodes, weights) -> (library seconds, fxc seconds) for the target (filled: its device open);
    weights: the model graph's weight ids; build: the driver's build function."""
    plain = dataclasses.replace(target, attrs=tuple(kv for kv in target.attrs if kv[0] != "libs"))

    def cost(library, nodes, weights=frozenset()) -> tuple:
        key = workload_key(library.name, nodes, target)
        path = cache_dir() / "offload.json"
        known = _load(path)
        if key in known:
            return tuple(known[key])
        g = _alone(nodes, weights)
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(v.shape).astype(v.dtype) for v in g.inputs]
        figures = _race([build(g, target, offload="always"), build(g, plain)], arrays)
        known = _load(path)             # (another build may have added its own)
        known[key] = figures
        try:
            atomic_write(path, json.dumps(known, indent=0).encode())
        except OSError:
            pass                        # an unwritable cache only costs the next build a measurement
        return figures
    return cost
