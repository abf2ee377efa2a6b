"""quantize_chains: the dequantize -> conv2d / matmul -> [+ bias] -> [relu] -> [quantize] chains of a quantised
model (ONNX QDQ, PyTorch PT2E) become integer ops with int32 accumulation and the requantisation fused
(fxc/ops/quant.py, docs/int8.md):

    quantize(relu(add(conv2d(pad(dequantize(xq, sx, zx), 0.0), dequantize(wq, sw, 0)), b)), sy, zy)
        -> qconv2d(xq, wq, b, sx, zx, sw, 0, sy, zy; padding, relu=True, out_dtype=the quantize's dtype)
    (a clamp to [0, hi] before the quantize, ReLU6: relu=True and qmax = min(qmax, quantize(hi)), exact)
    add(matmul(dequantize(aq, sa, za), dequantize(wq, sw, 0)), b)          (the result read as float)
        -> qmatmul(aq, wq, b, sa, za, sw, 0, 1.0, 0; out_dtype="float32")
    quantize(max_pool2d(dequantize(xq, s, z)), s, z)                        (a reshape too; each of several such
        -> max_pool2d(xq)                                                    quantizes of the pool alike)

Takes a typed Graph, returns it with such chains rewritten (requant="float": the frameworks' definition of the
chain; inverse=True where the quantize multiplies by the reciprocal scale, as PyTorch's does). The weight is the
dequantize of an int8 constant or weight, per tensor or per output channel, with zero points of 0; the activation
is uint8 or int8 with one scale and zero point (constants, or values computed per call in dynamic quantisation). A
bias that is itself the dequantize of an int32 constant at scale sx * sw is added to the accumulator as integers.
Everything else stays as it was, in float; a scheme fxc has no integer kernel for (weight zero points, uint8 or
int16 weights, per-channel activations) warns once per build, naming it (fxc.errors.QuantizationWarning). The build
option quantized="float" (fxc/driver/options.py) turns the pass off; a graph without dequantize is returned as is.
"""
from __future__ import annotations

import numpy as np

from ...errors import QuantizationWarning
from ...ops.quant import RANGE
from ...ops.registry import get_op
from ..graph import Graph, Node
from .hoist import weight_derived


def quantize_chains(g, ctx):
    if ctx.quantized != "int8" or not any(n.op == "dequantize" for n in g.nodes):
        return g
    look = _Lookup(g)
    refused, rewrites = set(), {}
    for n in g.nodes:
        if n.op == "quantize":
            found = _passthrough(n, look)
            if found is not None:
                rewrites[n] = found
        elif n.op in ("conv2d", "matmul") and n.outputs[0].dtype == "float32":
            found = _match(n, look)
            if isinstance(found, str):
                refused.add(found)
            elif found is not None:
                rewrites[found[-1]] = found
    if refused:
        ctx.warn(QuantizationWarning(
            f"fxc: {'; '.join(sorted(refused))}: fxc has no integer kernels for this quantisation scheme, so these "
            f"ops compute in float32 as dequantize -> op defines them (exact, at float speed; docs/int8.md)"))
    if rewrites:
        g.nodes = _rewrite(g.nodes, rewrites)
    return g


class _Lookup:
    """The graph's producers, reader counts, outputs and weight-derived values, for the matchers."""

    def __init__(self, g: Graph):
        self.producer = {o.id: n for n in g.nodes for o in n.outputs}
        self.users = g.users()
        self.out_ids = {v.id for v in g.outputs}
        self.fixed = weight_derived(g)

    def made_by(self, v, op: str):
        n = self.producer.get(v.id)
        return n if n is not None and n.op == op else None

    def only_reader(self, v):
        """The one node reading v (v not a graph output), else None."""
        us = self.users.get(v.id, [])
        return us[0][0] if len(us) == 1 and v.id not in self.out_ids else None

    def weight_like(self, v) -> bool:
        return v.is_const or v.id in self.fixed


# -- matching ---------------------------------------------------------------------------------------------------------
def _match(n, look):
    """(kind, attrs, inputs, chain nodes...) for the chain starting at conv2d / matmul n; a refused scheme's name;
    or None where n is no quantised chain."""
    x_in, w_in = n.inputs
    padding, shape = (0, 0, 0, 0), None
    if n.op == "conv2d":
        x_in, padding = _unpad(x_in, look)
    elif n.attrs.get("trans_a"):
        return None
    elif look.made_by(x_in, "reshape") is not None:      # linear over [B, S, K] as a matmul of [B * S, K]
        x_in, shape = x_in.node.inputs[0], x_in.shape
    dx, dw = look.made_by(x_in, "dequantize"), look.made_by(w_in, "dequantize")
    if dx is None or dw is None or not look.weight_like(dw.inputs[0]) \
            or shape is not None and dx.inputs[1].type.numel != 1:
        return None
    channels = n.outputs[0].shape[1] if n.op == "conv2d" else n.outputs[0].shape[-1]
    scheme = _activation_scheme(dx) or _weight_scheme(n, dw, look)
    if scheme is not None:
        return scheme
    xq, sx, zx = dx.inputs
    xq = xq if shape is None else _Reshape(xq, shape)
    wq, sw, zw = dw.inputs
    bias, relu, end, chain, capped = _epilogue(n, channels, sx, sw, look)
    q = end if end.op == "quantize" else None
    if q is not None:
        out = {"out_dtype": q.attrs.get("dtype", "uint8"), "qmin": q.attrs.get("qmin"), "qmax": q.attrs.get("qmax"),
               "inverse": bool(q.attrs.get("inverse", False))}
        if capped is not None:
            out["qmax"] = _cap(q, capped)
        sy, zy = q.inputs[1], q.inputs[2]
    else:
        out = {"out_dtype": "float32"}
        sy, zy = Graph.const(np.float32(1.0)), Graph.const(np.int32(0))
    attrs = dict(out, relu=relu, requant="float")
    if n.op == "conv2d":
        attrs.update(stride=n.attrs.get("stride", (1, 1)), dilation=n.attrs.get("dilation", (1, 1)),
                     groups=n.attrs.get("groups", 1), padding=padding)
    else:
        attrs.update(trans_b=bool(n.attrs.get("trans_b", False)))
    return ("q" + n.op, attrs, [xq, wq, bias, sx, zx, sw, zw, sy, zy], *chain)


def _passthrough(q, look):
    """(op, attrs, [xq], f, q) where q is quantize(f(dequantize(xq))) with the same per-tensor scale, zero point and
    dtype, f a max_pool2d or a reshape: f(xq) is that value exactly (a max commutes with the monotone dequantize,
    and quantize(dequantize(xq)) is xq); else None."""
    f = look.made_by(q.inputs[0], "max_pool2d") or look.made_by(q.inputs[0], "reshape")
    d = look.made_by(f.inputs[0], "dequantize") if f is not None and _quantized_alike(f.outputs[0], q, look) else None
    if d is None or d.inputs[0].dtype != q.attrs.get("dtype") or d.inputs[0].dtype not in ("uint8", "int8") \
            or (q.attrs.get("qmin"), q.attrs.get("qmax")) not in ((None, None), RANGE[d.inputs[0].dtype]) \
            or not all(_same(a, b) for a, b in zip(d.inputs[1:], q.inputs[1:])):
        return None
    if any(u.op != "quantize" for u, _ in look.users[f.outputs[0].id]):
        return (f.op, f.attrs, [d.inputs[0]], q)        # f stays for its unread readers (eliminate_dead_code)
    return (f.op, f.attrs, [d.inputs[0]], f, q)


def _quantized_alike(v, q, look) -> bool:
    """Every reader of v (not a graph output) that is read itself is a quantize like q: its one reader, or one of
    PT2E's quantizes of a value per reader; torch's max pool comes with an unread max_pool2d_indices reader."""
    readers = [u for u, _ in look.users.get(v.id, [])
               if any(o.id in look.users or o.id in look.out_ids for o in u.outputs)]
    return v.id not in look.out_ids and bool(readers) and all(
        u.op == "quantize" and u.attrs == q.attrs and all(_same(a, b) for a, b in zip(u.inputs[1:], q.inputs[1:]))
        for u in readers)


def _same(a, b) -> bool:
    """a and b hold one value, the same (one Value, or constants of equal data)."""
    if a.type.numel != 1 or b.type.numel != 1:
        return False
    return a is b or a.is_const and b.is_const and a.data.reshape(()) == b.data.reshape(())


def _unpad(v, look):
    """(input, (top, left, bottom, right)) of a zero pad of the last two dims that v is, else (v, no padding)."""
    p = look.made_by(v, "pad")
    if p is None or p.attrs.get("mode", "constant") != "constant" or float(p.attrs.get("value", 0.0)) != 0.0:
        return v, (0, 0, 0, 0)
    pad = tuple(p.attrs["pad"])
    if len(pad) > 4 and any(pad[4:]) or min(pad) < 0:
        return v, (0, 0, 0, 0)
    left, right, top, bottom = (pad + (0, 0, 0, 0))[:4]
    return p.inputs[0], (top, left, bottom, right)


def _activation_scheme(dx):
    xq, sx, _ = dx.inputs
    if xq.dtype not in ("uint8", "int8"):
        return f"{xq.dtype} activations"
    if sx.type.numel != 1:
        return "per-channel activation scales"
    return None


def _weight_scheme(n, dw, look):
    """The name of a weight quantisation scheme the integer ops do not take, else None."""
    wq, sw, zw = dw.inputs
    if wq.dtype != "int8":
        return f"{wq.dtype} weights"
    if zw.is_const and np.any(zw.data != 0):
        return "weight zero points (asymmetric int8 weights)"
    if sw.type.numel == 1:
        return None
    if n.op == "conv2d":
        channel_axis = 0
    elif wq.type.ndim == 2:
        channel_axis = 0 if n.attrs.get("trans_b") else 1
    else:
        return "per-channel scales of a batched matmul operand"
    if dw.attrs.get("axis", 1) % wq.type.ndim != channel_axis:
        return "per-group or per-input-channel weight scales"
    return None


def _epilogue(n, channels, sx, sw, look):
    """(bias, relu, last node, chain nodes) after n: an add of a per-channel constant, a relu, a quantize (per
    tensor, to uint8 / int8), each where it is the only reader of the one before."""
    chain, cur = [n], n
    bias = None
    nxt = look.only_reader(cur.outputs[0])
    if nxt is not None and nxt.op == "add":
        bias = _bias(nxt, cur.outputs[0], channels, sx, sw, look)
        if bias is not None:
            chain.append(nxt)
            cur, nxt = nxt, look.only_reader(nxt.outputs[0])
    relu = nxt is not None and (nxt.op == "relu" or nxt.op == "clamp" and nxt.attrs.get("lo") == 0
                                and nxt.attrs.get("hi") is None)
    capped = nxt if _relu_capped(nxt, look) else None
    if relu or capped is not None:
        chain.append(nxt)
        cur, nxt = nxt, look.only_reader(nxt.outputs[0])
    if nxt is not None and nxt.op == "quantize" and nxt.inputs[0] is cur.outputs[0] \
            and nxt.attrs.get("dtype") in ("uint8", "int8") and all(v.type.numel == 1 for v in nxt.inputs[1:]):
        chain.append(nxt)
    elif capped is not None:                   # a cap that no quantize follows stays a float op of its own
        chain.pop()
        capped = None
    return bias if bias is not None else _zeros(channels), relu or capped is not None, chain[-1], chain, capped


def _relu_capped(n, look) -> bool:
    """n clamps to [0, hi] (ReLU6: PyTorch's hardtanh(0, 6), ONNX's Clip(0, 6)) and a quantize with a constant scale
    and zero point reads it alone: the cap folds into that quantize's qmax (_cap)."""
    if n is None or n.op not in ("clamp", "hardtanh") or n.attrs.get("lo") != 0 or n.attrs.get("hi") is None:
        return False
    q = look.only_reader(n.outputs[0])
    return q is not None and q.op == "quantize" and all(v.is_const for v in q.inputs[1:])


def _cap(q, capped) -> int:
    """The quantize q's qmax once the clamp `capped` before it folds in: quantize is monotone, so quantize(min(y, hi))
    = min(quantize(y), quantize(hi)), exactly; quantize(hi) computed by the op's own reference (its rounding, its
    reciprocal where inverse)."""
    hi = np.float32(capped.attrs["hi"])
    return int(get_op("quantize").reference(np.array([hi], np.float32), q.inputs[1].data.reshape(()),
                                            q.inputs[2].data.reshape(()), **q.attrs)[0])


def _zeros(channels):
    return Graph.const(np.zeros(channels, np.int32))


def _bias(add, acc, channels, sx, sw, look):
    """The per-channel bias that `add` adds to acc, as [channels] (the int32 values it dequantizes where it is the
    dequantize of an int32 constant at scale sx * sw), else None."""
    b = add.inputs[1] if add.inputs[0] is acc else add.inputs[0]
    if b is acc or add.outputs[0].shape != acc.shape or b.dtype != "float32" or not look.weight_like(b) \
            or b.type.numel != channels or b.type.ndim > acc.type.ndim or not _along_channels(b, acc):
        return None
    src = b
    while look.made_by(src, "reshape") is not None:
        src = src.node.inputs[0]
    d = look.made_by(src, "dequantize")
    if d is not None and d.inputs[0].dtype == "int32" and d.inputs[0].is_const and _is_scale(d, sx, sw):
        return Graph.const(np.ascontiguousarray(d.inputs[0].data.reshape(channels)))
    if b.shape == (channels,):
        return b
    return Graph.const(np.ascontiguousarray(b.data.reshape(channels))) if b.is_const else _Reshape(b, (channels,))


def _along_channels(b, acc) -> bool:
    """b's values lie along acc's channel axis (1 of NCHW, the last of a matmul's result) when they broadcast."""
    shape, nd = b.shape, acc.type.ndim
    axis = 1 if acc.node is not None and acc.node.op == "conv2d" else nd - 1
    full = (1,) * (nd - len(shape)) + tuple(shape)
    return all(s == 1 for d, s in enumerate(full) if d != axis)


def _is_scale(d, sx, sw) -> bool:
    """The dequantize d's zero point is 0 and its scale is sx * sw in float32 (all constants)."""
    sb, zb = d.inputs[1], d.inputs[2]
    if not (sb.is_const and zb.is_const and sx.is_const and sw.is_const) or np.any(zb.data != 0):
        return False
    want = np.float32(sx.data.reshape(())) * sw.data.astype(np.float32).reshape(-1)
    return sb.data.size in (1, want.size) and np.array_equal(np.broadcast_to(sb.data.reshape(-1), want.shape), want)


class _Reshape:
    """An operand of the integer op to be reshaped where the op is placed: a bias computed from weights (to
    [channels]), the int8 activation of a matmul that read it reshaped."""

    def __init__(self, value, shape):
        self.value, self.shape = value, tuple(shape)


# -- rewriting ------------------------------------------------------------------------------------------------------
def _rewrite(nodes, rewrites):
    """nodes with each chain's nodes replaced by its integer op, placed where the chain's last node was (every
    operand is defined by then); the chain's last result becomes the integer op's, so its readers read it."""
    dropped = {id(m) for found in rewrites.values() for m in found[3:]}
    out = []
    for n in nodes:
        found = rewrites.get(n)
        if found is None:
            if id(n) not in dropped:
                out.append(n)
            continue
        kind, attrs, inputs, *_ = found
        shaped = [_node("reshape", [v.value], {"shape": v.shape}) if isinstance(v, _Reshape) else None
                  for v in inputs]
        out += [r for r in shaped if r is not None]
        q = _node(kind, [v if r is None else r.outputs[0] for v, r in zip(inputs, shaped)], attrs)
        result = n.outputs[0]
        q.outputs[0] = result
        result.node, result.index = q, 0
        out.append(q)
    return out


def _node(op: str, inputs: list, attrs: dict) -> Node:
    return Node(op, inputs, attrs, get_op(op).infer([v.type for v in inputs], **attrs))
