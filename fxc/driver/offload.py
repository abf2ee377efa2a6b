"""The offload cost choice (docs/byoc.md): an external library's match against fxc's own kernels, timed on the
target's device at build, kept in the tuning log per workload and device.

    cost = offload_cost(target, build, log)     # (library, nodes, weights) -> (library seconds, fxc seconds)

Each side is the match alone as a graph (its inputs random, its constants kept, its weight inputs weights: held
on the device between calls, as in the model), built for the target with the
library forced (offload="always") and without it, and called on the device: the time is the least of ROUNDS calls,
the two sides called in turn (a passing load weighs on both alike), after a warm-up (the library's first call
compiles its kernels). Both sides move the same inputs and outputs. The figures are two records of the tuning log
(fxc/tuning/log.py; the build's tuning_log, else the default log beside the compile cache): workloads "offload:" +
a digest of the match (library, ops, attributes, shapes, device and driver) + ":<library>" or ":fxc", configs
{"offload": library} and {} (fxc's kernels), so a later build of the same workload on the same device measures
nothing, and the figures travel, merge and distil with the tuning records (`fxc tune --log`). tuning_log=False:
measured per build, kept nowhere.
"""
from __future__ import annotations

import dataclasses
import hashlib
import time

import numpy as np

from ..relay_like.graph import Graph
from ..tuning import log as tuning_log
from ..tuning.workload import target_key

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


def _recorded(path, workload: str, target: str, library: str) -> tuple | None:
    """(library seconds, fxc seconds) of the log's fastest records of the workload's two sides on this target."""
    sides: dict = {}
    for r in tuning_log.read(path) if path is not None else ():
        if r["target"] == target and r["workload"] in (f"{workload}:{library}", f"{workload}:fxc"):
            side = r["workload"].rsplit(":", 1)[1]
            sides[side] = min(sides.get(side, float("inf")), tuning_log.cost(r))
    found = sides.get(library, float("inf")), sides.get("fxc", float("inf"))
    return found if float("inf") not in found else None


def offload_cost(target, build, log=None):
    """(library, nodes, weights) -> (library seconds, fxc seconds) for the target (filled: its device open);
    weights: the model graph's weight ids; build: the driver's build function; log: the tuning log the figures are
    read from and appended to (None: none, measured every build)."""
    plain = dataclasses.replace(target, attrs=tuple(kv for kv in target.attrs if kv[0] != "libs"))
    tkey = target_key(target)

    def cost(library, nodes, weights=frozenset()) -> tuple:
        key = workload_key(library.name, nodes, target)
        workload = "offload:" + hashlib.sha256(key.encode()).hexdigest()[:32]
        known = _recorded(log, workload, tkey, library.name)
        if known is not None:
            return known
        g = _alone(nodes, weights)
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(v.shape).astype(v.dtype) for v in g.inputs]
        figures = _race([build(g, target, offload="always"), build(g, plain)], arrays)
        if log is not None:
            desc = f"{library.name} or fxc: " + " -> ".join(n.op for n in nodes)
            for side, config, t in ((library.name, {"offload": library.name}, figures[0]), ("fxc", {}, figures[1])):
                try:
                    tuning_log.append(log, tuning_log.make_record(f"{workload}:{side}", tkey, config, [t], None,
                                                                  desc, str(target)))
                except OSError:
                    pass                # an unwritable log only costs the next build a measurement
        return figures
    return cost
