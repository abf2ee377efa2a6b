"""The inference path of the `fxc` torch.compile backend (fxc/capture/torch/backend.py): no AOT autograd around the
graph.

Takes Dynamo's FX graph and its example inputs, compiled while grad mode is off (torch.no_grad(),
torch.inference_mode()). Produces, when the graph allows it, an ATen inference graph with Dynamo's calling
convention (the same inputs in the same order, a flat tuple of outputs), traced with the capture's decompositions,
and the names of its placeholders that are parameters or buffers; else None, and the backend goes through AOT
autograd as in grad mode.

Why: AOT autograd's runtime wrappers (their checks on hundreds of parameter inputs, the graph's boxed call, the
grad-mode and view-tracking switches) cost more per call than a small model's fxc Python path. Dynamo guards the
grad mode (a global-state guard), so code compiled here never runs with grad on: a call in grad mode recompiles
and goes through AOT autograd. The graph must be a pure function of its inputs (no input mutation, no output that
aliases an input or another output) with static shapes and no weights of its own (get_attr): anything else takes the
AOT autograd path, which handles it.
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("fxc")


def inference_graph(gm: torch.fx.GraphModule, example_inputs, decompositions: dict):
    """(ATen GraphModule, names of its placeholders that are parameters/buffers), or None (AOT autograd instead)."""
    if torch.is_grad_enabled() or not _eligible(gm, example_inputs):
        return None
    from torch._functorch.aot_autograd import aot_export_joint_simple  # deferred: torch._functorch is slow to import
    try:
        aten = aot_export_joint_simple(gm, tuple(example_inputs), trace_joint=False, decompositions=decompositions)
    except Exception as e:      # noqa: BLE001 (mutations, aliasing, anything else: AOT autograd handles it)
        log.debug("fxc: no inference fast path (%s: %s); using AOT autograd", type(e).__name__, e)
        return None
    _drop_metadata_asserts(aten)
    placeholders = [n.name for n in aten.graph.find_nodes(op="placeholder")]
    if len(placeholders) != len(example_inputs):    # effect tokens or other extra inputs: not Dynamo's convention
        return None
    dynamo = list(gm.graph.find_nodes(op="placeholder"))
    static = {placeholders[i] for i, n in enumerate(dynamo)
              if n.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")}
    return aten, static


def _eligible(gm, example_inputs) -> bool:
    """Tensors of static shapes in, one placeholder each, no parameters or buffers of the graph module itself."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if len(placeholders) != len(example_inputs) or next(gm.parameters(), None) is not None \
            or next(gm.buffers(), None) is not None:
        return False
    for node, a in zip(placeholders, example_inputs):
        if not isinstance(a, torch.Tensor) or type(a) not in (torch.Tensor, torch.nn.Parameter):
            return False        # SymInts, tensor subclasses
        meta = node.meta.get("example_value")
        if meta is None or not all(type(d) is int for d in (*meta.shape, *meta.stride())):
            return False        # symbolic sizes: the AOT autograd path keeps them symbolic
    return True


def _drop_metadata_asserts(gm) -> None:
    """Remove the tracer's metadata assertions (aten._assert_tensor_metadata, from `.to(dtype)`; AOT autograd's
    compile drops them too): with static shapes and the dtypes and devices Dynamo guards they hold, and as ops fxc
    has no kernel for they would cut the graph into eager pieces."""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten._assert_tensor_metadata.default:
            gm.graph.erase_node(node)
    gm.recompile()
