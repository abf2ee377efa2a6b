"""`fxc.partition_for(model, example_inputs, target)`: what a build for the target would offload to its external
libraries, shown before building (TVM's `partition_for_clml(mod, params)` one-liner, as a report to inspect).

Takes a PyTorch module with example inputs (captured whole, as fxc.from_torch does), an ONNX model (a ModelProto,
its bytes or a .onnx path; example inputs, if given, fix its input shapes), a model fxc.from_mxnet(..., shapes=)
compiled, or an fxc graph IR Graph, and a target naming libraries ("clml", "opencl -libs=clblast"); runs the graph
passes and the partition step exactly as the build does (the same PassContext: Caps, -libs=, offload, and for a
measured library the build's cost choice) and returns a Partition: the regions (library, matches, and for CLML the
serialised region graph the build would carry), every op left to fxc with its reason, and counts. Nothing is
compiled. The build itself needs no call of this: the target string is the one-liner
(`torch.compile(model, backend="fxc", options={"target": "clml"})`).
"""
from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field

from ..backends import fill, libraries_of
from ..errors import TargetError
from ..relay_like.passes import describe_partition
from ..relay_like.pipeline import plan_graph, run_passes
from ..target import Target
from ..tuning.frontends import graph_of
from .build import build
from .offload import offload_cost
from .options import check_options, pass_context
from .tuned import log_path


@dataclass
class RegionReport:
    library: str
    matches: list           # [(pattern, [op, ...], root node name)] in graph order
    graph: dict | None      # a whole-region library's serialised region graph (CLML), else None

    @property
    def ops(self) -> collections.Counter:
        return collections.Counter(op for _, ops, _ in self.matches for op in ops)


@dataclass
class Partition:
    """What a build for `target` offloads: `regions` (RegionReport), `left` (node name -> (op, the reason it stays
    fxc's)), `offloaded_ops` / `left_ops` (op -> count) and str(): the lines fxc.explain shows."""
    target: str
    regions: list
    left: dict
    lines: list = field(repr=False)

    @property
    def offloaded_ops(self) -> collections.Counter:
        return sum((r.ops for r in self.regions), collections.Counter())

    @property
    def left_ops(self) -> collections.Counter:
        return collections.Counter(op for op, _ in self.left.values())

    def __str__(self) -> str:
        head = (f"partition for {self.target}: {len(self.regions)} region(s), {sum(self.offloaded_ops.values())} ops "
                f"offloaded, {sum(self.left_ops.values())} left to fxc")
        return "\n".join([head, *self.lines])


def _graph_of(model, example_inputs):
    """The graph IR of a model: a Graph as it is; a torch module captured whole (torch.export, as from_torch); an
    ONNX model (ModelProto, bytes or .onnx path); a model fxc.from_mxnet(..., shapes=) compiled."""
    return graph_of(model, example_inputs, "fxc.partition_for")


def partition_for(model, example_inputs=None, target="clml", **options) -> Partition:
    """The partition a build of `model` for `target` would make (see the module docstring); options: the build's
    (e.g. offload="always"). TargetError for a target that names no library."""
    check_options(options)
    target = Target.parse(target)
    if not target.libs:
        raise TargetError(f"target {target} names no external library: partition_for shows the regions of "
                          f"'clml' or '<kind> -libs=<library>' (e.g. 'opencl -libs=clblast'); docs/byoc.md")
    try:
        target = fill(target)           # the device's Caps (fp16, extensions) where it opens here
    except TargetError:
        libraries_of(target)            # (a library unknown or not installed is still the error it is)
    measured = target.device is not None and options.get("offload", "auto") == "auto"
    ctx = pass_context(target, options, 0, offload_cost(target, build, log_path(options)) if measured else None)
    graph = _graph_of(model, example_inputs)
    planned = plan_graph(run_passes(graph, ctx), ctx)
    libs = {lib.name: lib for lib in ctx.libraries}
    users, outs, regions = planned.graph.users(), {v.id for v in planned.graph.outputs}, []
    for r in planned.regions:
        mine, text = set(r.nodes), None
        if libs[r.library].whole_regions:
            leaving = {o.id for n in r.nodes for o in n.outputs
                       if o.id in outs or any(u not in mine for u, _ in users.get(o.id, []))}
            text = libs[r.library].lower(r, leaving)[3]
        regions.append(RegionReport(r.library, [(pat, [n.op for n in ns], ns[-1].name) for pat, ns in r.matches],
                                    json.loads(text) if text else None))
    inside = {n.name for r in planned.regions for n in r.nodes}
    left = {n.name: (n.op, planned.offload_notes.get(n.name, "")) for n in planned.graph.nodes
            if n.name not in inside and n.outputs[0].id not in planned.hoisted}
    return Partition(str(target), regions, left, describe_partition(planned))
