"""CLML's codegen: a region (its matches, producers first) -> its serialised region graph (docs/byoc.md, "The
CLML region graph"), the JSON that the runtime turns into CLML tensors and ops (fxc/runtime/opencl/clml.py) and
the reference interpreter runs in the tests (tests/backends/external/clml_interpreter.py).

    text, operands = region_graph(region, leaving)     # leaving: ids of the values read after the region

`operands` are the graph Values the region's plan step takes, in the order of the graph's "operands" list: the
values that leave the region (outputs) first, then the values it reads (inputs: activations, weights and
constants). Each match is one CLML op: a fused conv takes its zero pad as padding, its bias, its batch norm (a
per-channel scale and shift) and its ReLU / ReLU6; 0-d constants are written into the graph.
"""
from __future__ import annotations

import json

from .patterns import BINARY, other

FORMAT, VERSION = "fxc.clml.region", 1
FP16_ACCURACY = ("float16 region: CLML computes in CL_HALF_FLOAT (11-bit significand); expect a relative error "
                 "of about 1e-3 per op and 1e-2 over a network against float32 (fxc's tests take rtol 1e-2)")


class _Names:
    """Value -> its name in the region graph: "in<k>"/"out<k>" for the step's operands, "t<k>" for the rest."""

    def __init__(self):
        self.names, self.tensors, self.count = {}, {}, 0

    def __call__(self, v) -> str:
        if v.id not in self.names:
            self.names[v.id] = f"t{self.count}"
            self.count += 1
            self.tensors[self.names[v.id]] = {"shape": list(v.shape), "dtype": v.dtype}
        return self.names[v.id]


def _hw_padding(pad: tuple) -> list:
    """ATen's pad of the last two dims (w_left, w_right, h_top, h_bottom) -> [top, left, bottom, right]."""
    p = list(pad) + [0] * (4 - len(pad))
    return [p[2], p[0], p[3], p[1]]


def _epilogue(nodes, prev, name) -> dict:
    """A fused conv's epilogue as its inputs and activation: bias (the first add), bn_scale (a mul), bn_shift (an
    add after the bias or the scale), activation ("relu", "relu6")."""
    out = {}
    for n in nodes:
        if n.op == "mul":
            out["bn_scale"] = name(other(n, prev))
        elif n.op == "add":
            out["bn_shift" if "bias" in out or "bn_scale" in out else "bias"] = name(other(n, prev))
        else:
            out["activation"] = "relu" if n.op == "relu" else "relu6"
        prev = n.outputs[0]
    return out


def _node(pattern: str, nodes: list, name) -> dict:
    """One CLML op of the region graph for a match."""
    root = nodes[-1]
    if pattern in ("conv2d", "conv2d_transpose"):
        at = next(i for i, n in enumerate(nodes) if n.op in ("conv2d", "conv_transpose2d"))
        conv = nodes[at]
        x, w = conv.inputs[:2]
        attrs = {"stride": list(conv.attrs.get("stride", (1, 1))), "dilation": list(conv.attrs.get("dilation", (1, 1)))}
        if conv.op == "conv2d":
            pad = nodes[0].attrs["pad"] if at else ()
            groups = conv.attrs.get("groups", 1)
            attrs.update(padding=_hw_padding(pad), groups=groups, mode="depthwise" if groups > 1 else "convolution")
            x = nodes[0].inputs[0] if at else x
        else:
            ph, pw = conv.attrs.get("padding", (0, 0))
            attrs.update(padding=[ph, pw, ph, pw])
        ins = {"input": name(x), "weight": name(w)}
        fused = _epilogue(nodes[at + 1:], conv.outputs[0], name)
        attrs["activation"] = fused.pop("activation", None)
        ins.update(fused)
        return {"op": "convolution" if conv.op == "conv2d" else "transposed_convolution", "inputs": ins,
                "attrs": attrs}
    if pattern in ("dense", "batch_matmul"):
        mm = nodes[0]
        a, b = mm.inputs
        ins = {"input": name(a), "weight": name(b)}
        if len(nodes) > 1:
            ins["bias"] = name(other(nodes[1], mm.outputs[0]))
        op = "batch_matmul" if a.type.ndim == 3 else "fully_connected"
        return {"op": op, "inputs": ins, "attrs": {"transpose_weight": bool(mm.attrs.get("trans_b", False))}}
    if pattern == "batch_norm":
        mul, add = nodes
        x = max(mul.inputs, key=lambda v: v.type.numel)
        return {"op": "batchnorm", "inputs": {"input": name(x), "scale": name(other(mul, x)),
                                              "shift": name(other(add, mul.outputs[0]))}, "attrs": {}}
    if pattern == "depth_to_space":
        return {"op": "depth_to_space", "inputs": {"input": name(nodes[0].inputs[0])},
                "attrs": {"block": nodes[0].outputs[0].shape[2], "mode": "CRD"}}
    x = name(root.inputs[0])
    if pattern == "binary":
        return {"op": "binary", "inputs": {"a": x, "b": name(root.inputs[1])}, "attrs": {"mode": BINARY[root.op]}}
    if pattern == "relu":
        return {"op": "activation", "inputs": {"input": x}, "attrs": {"mode": "relu"}}
    if pattern == "clip":
        lo, hi = root.attrs.get("lo"), root.attrs.get("hi")
        mode = "relu6" if (lo, hi) == (0.0, 6.0) else "clip"
        return {"op": "activation", "inputs": {"input": x},
                "attrs": {"mode": mode, **({"lo": lo, "hi": hi} if mode == "clip" else {})}}
    if pattern == "pad":
        nd = root.inputs[0].type.ndim
        pad, widths = root.attrs["pad"], [[0, 0] for _ in range(nd)]
        for k in range(len(pad) // 2):
            widths[nd - 1 - k] = [pad[2 * k], pad[2 * k + 1]]
        return {"op": "pad", "inputs": {"input": x}, "attrs": {"widths": widths,
                                                               "value": float(root.attrs.get("value", 0.0))}}
    if pattern == "concat":
        return {"op": "concat", "inputs": {f"input{i}": name(v) for i, v in enumerate(root.inputs)},
                "attrs": {"axis": root.attrs["dim"] % root.inputs[0].type.ndim}}
    if pattern == "softmax":
        return {"op": "softmax", "inputs": {"input": x}, "attrs": {"axis": 1}}
    if pattern == "reshape":
        return {"op": "reshape", "inputs": {"input": x}, "attrs": {}}
    if pattern == "pool" and root.op != "adaptive_avg_pool2d":
        ph, pw = root.attrs.get("padding", (0, 0))
        return {"op": "pool", "inputs": {"input": x}, "attrs": {
            "mode": "max" if root.op == "max_pool2d" else "average", "window": list(root.attrs["kernel"]),
            "stride": list(root.attrs.get("stride") or root.attrs["kernel"]), "padding": [ph, pw, ph, pw]}}
    if pattern == "resize_bilinear":
        return {"op": "resize_bilinear", "inputs": {"input": x},
                "attrs": {"mode": root.attrs.get("coord", "half_pixel")}}
    mode = "max" if root.op == "amax" else "average"
    return {"op": "global_pool", "inputs": {"input": x}, "attrs": {"mode": mode}}


def region_graph(region, leaving: set) -> tuple:
    """(the region graph as JSON text, its operand Values in the plan step's order); leaving: the ids of the values
    read outside the region (by later groups, or graph outputs)."""
    inside = {o.id for n in region.nodes for o in n.outputs}
    outs = [ns[-1].outputs[0] for _, ns in region.matches if ns[-1].outputs[0].id in leaving]
    ins, seen = [], set()
    for n in region.nodes:
        for v in n.inputs:
            if v.id not in inside and v.id not in seen and not (v.is_const and v.type.ndim == 0):
                seen.add(v.id)
                ins.append(v)
    name = _Names()
    for k, v in enumerate(outs):
        name.names[v.id] = f"out{k}"
        name.tensors[f"out{k}"] = {"shape": list(v.shape), "dtype": v.dtype}
    for k, v in enumerate(ins):
        name.names[v.id] = f"in{k}"
        name.tensors[f"in{k}"] = {"shape": list(v.shape), "dtype": v.dtype,
                                  "role": "constant" if v.is_const else "input"}
    nodes = []
    for pattern, ns in region.matches:
        node = _node(pattern, list(ns), name)
        node["output"] = name(ns[-1].outputs[0])
        node["fxc"] = f"{pattern}({'+'.join(n.op for n in ns)})"
        nodes.append(node)
    dtype = outs[0].dtype if outs else region.nodes[-1].outputs[0].dtype
    graph = {"format": FORMAT, "version": VERSION, "dtype": dtype,
             **({"accuracy": FP16_ACCURACY} if dtype == "float16" else {}),
             "operands": [f"out{k}" for k in range(len(outs))] + [f"in{k}" for k in range(len(ins))],
             "tensors": name.tensors, "nodes": nodes}
    return _dump(graph), outs + ins


def _dump(graph: dict) -> str:
    """JSON with one line per tensor and per node (readable, and diffs of known-good files stay small)."""
    def part(key, value):
        if isinstance(value, dict):
            return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()) + "\n }"
        if key == "nodes":
            return "[\n" + ",\n".join(f"  {json.dumps(n)}" for n in value) + "\n ]"
        return json.dumps(value)
    return "{\n" + ",\n".join(f" {json.dumps(k)}: {part(k, v)}" for k, v in graph.items()) + "\n}\n"

