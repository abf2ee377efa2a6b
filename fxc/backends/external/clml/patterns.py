"""CLML's pattern table over fxc's graph IR, with TVM's checks (its relay/op/contrib/clml.py rules), each reading the
target's Caps: float32 or float16 (the latter only where the device has it), NCHW (fxc's conv and pool ops are NCHW
by construction; a channels-last model's permutes are not in the table), batch 1, rank <= 4, every dim <= 32768,
static sizes, no broadcasting in binary ops, bilinear resizing only, and the depthwise limits (a grouped conv runs
only as depthwise: groups = in = out channels, no dilation).

A check takes (matched nodes, producers first; caps) and returns the reason CLML does not run them, or None.
Patterns are tried longest first at a root, so a conv takes its pad, bias, batch norm and activation.
"""
from __future__ import annotations

import itertools

from ..library import Pattern

MAX_DIM = 32768                      # CLML's largest tensor dim (TVM's check)
FLOATS = ("float32", "float16")
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min"}


def _values(nodes) -> list:
    return [v for n in nodes for v in (*n.inputs, *n.outputs)]


def _common(nodes, caps) -> str | None:
    """The checks every CLML op shares (dtypes, rank, sizes, batch 1)."""
    for v in _values(nodes):
        if v.is_const and v.type.ndim == 0:
            continue
        if v.dtype not in FLOATS:
            return f"{v.dtype} tensors: CLML runs float32 and float16 only"
        if v.dtype not in caps.dtypes:
            return f"{v.dtype}: the device has no {v.dtype} (cl_khr_fp16)"
        if any(not isinstance(d, int) for d in v.shape):
            return "symbolic sizes: CLML's tensors have fixed sizes"
        if v.type.ndim > 4:
            return f"rank {v.type.ndim} ({v.shape}): CLML's tensors have at most 4 dims"
        if any(d > MAX_DIM for d in v.shape):
            return f"dim {max(v.shape)} of {v.shape} exceeds CLML's limit of {MAX_DIM}"
        if v.type.numel == 0:
            return "an empty tensor"
    if len({v.dtype for v in _values(nodes) if not (v.is_const and v.type.ndim == 0)}) > 1:
        return "mixed dtypes: a CLML region computes in one precision"
    for v in (nodes[0].inputs[0], *nodes[-1].outputs):
        if v.type.ndim == 4 and v.shape[0] != 1:
            return f"batch {v.shape[0]}: CLML runs batch 1 (NCHW with N = 1)"
    return None


def per_channel(v, channels: int) -> bool:
    """v is one value per channel of an NCHW tensor: (C,1,1) or (1,C,1,1) (a (C,) broadcasts along W, not C)."""
    return v.type.ndim in (3, 4) and tuple(v.shape[-3:]) == (channels, 1, 1) and v.type.numel == channels


def other(n, v):
    """The operand of binary node n that is not the value v."""
    a, b = n.inputs
    return b if a is v else a


def _epilogue(nodes, at: int, channels: int) -> str | None:
    """The nodes from `at` on (bias add, batch norm mul+add, activation) are a per-channel epilogue."""
    prev = nodes[at - 1].outputs[0]
    for n in nodes[at:]:
        if n.op in ("add", "mul"):
            if not per_channel(other(n, prev), channels) or other(n, prev) is prev:
                return f"{n.op} {n.name} is not per channel (a broadcast CLML's fused ops do not take)"
        elif n.op == "hardtanh" and (n.attrs.get("lo"), n.attrs.get("hi")) != (0.0, 6.0):
            return f"clip({n.attrs.get('lo')}, {n.attrs.get('hi')}) is neither ReLU nor ReLU6"
        prev = n.outputs[0]
    return None


def _check_conv(nodes, caps) -> str | None:
    at = next(i for i, n in enumerate(nodes) if n.op in ("conv2d", "conv_transpose2d"))
    conv = nodes[at]
    if at and (conv.inputs[0].node is not nodes[0] or nodes[0].attrs.get("mode", "constant") != "constant"
               or nodes[0].attrs.get("value", 0.0) != 0.0 or len(nodes[0].attrs["pad"]) > 4):
        return "the pad before the conv is not a zero pad of H and W"
    x, w = conv.inputs[:2]
    cin, cout = x.shape[1], conv.outputs[0].shape[1]
    groups = conv.attrs.get("groups", 1)
    if conv.op == "conv_transpose2d":
        if groups != 1 or tuple(conv.attrs.get("dilation", (1, 1))) != (1, 1) or \
                tuple(conv.attrs.get("output_padding", (0, 0))) != (0, 0):
            return "a transposed conv with groups, dilation or output padding"
    elif groups != 1:
        if not (groups == cin == cout):
            return f"a grouped conv (groups {groups}, {cin} -> {cout} channels): CLML runs depthwise only"
        if tuple(conv.attrs.get("dilation", (1, 1))) != (1, 1):
            return "a dilated depthwise conv"
    if w.node is not None and w.node in nodes:
        return "the weight is computed inside the match"
    return _epilogue(nodes, at + 1, cout)


def _check_dense(nodes, caps) -> str | None:
    mm = nodes[0]
    a, b = mm.inputs
    if mm.attrs.get("trans_a", False):
        return "a transposed left operand"
    if a.type.ndim == 2 and b.type.ndim == 2:
        if len(nodes) > 1:
            bias = other(nodes[1], mm.outputs[0])
            if bias.type.numel != mm.outputs[0].shape[1] or bias.type.ndim > 2 or bias is mm.outputs[0]:
                return "the add after the dense is not a bias of one value per output"
        return None
    return f"a matmul of {a.shape} x {b.shape}: CLML's dense takes 2-D operands"


def _check_batch_matmul(nodes, caps) -> str | None:
    mm = nodes[0]
    a, b = mm.inputs
    if mm.attrs.get("trans_a", False):
        return "a transposed left operand"
    if a.type.ndim == 3 and b.type.ndim == 3 and a.shape[0] == b.shape[0]:
        return None
    return f"a matmul of {a.shape} x {b.shape}: CLML's batch matmul takes 3-D operands of one batch"


def _check_binary(nodes, caps) -> str | None:
    a, b = nodes[0].inputs
    if a.shape != b.shape:
        return f"broadcasting {a.shape} with {b.shape}: CLML's binary ops take equal shapes"
    return None


def _check_batch_norm(nodes, caps) -> str | None:
    x = max(nodes[0].inputs, key=lambda v: v.type.ndim == 4 and v.type.numel)
    if x.type.ndim != 4:
        return "batch norm over a tensor that is not NCHW"
    prev = x
    for n in nodes:
        if not per_channel(other(n, prev), x.shape[1]) or other(n, prev) is prev:
            return f"{n.op} {n.name} is not per channel: not a batch norm"
        prev = n.outputs[0]
    return None


def _check_clip(nodes, caps) -> str | None:
    n = nodes[0]
    if n.op == "clamp" and (n.attrs.get("lo") is None or n.attrs.get("hi") is None):
        return "a one-sided clamp"
    return None


def _check_pad(nodes, caps) -> str | None:
    n = nodes[0]
    if n.attrs.get("mode", "constant") != "constant":
        return f"{n.attrs.get('mode')} padding: CLML pads with a constant"
    if any(p < 0 for p in n.attrs["pad"]):
        return "a negative pad (a crop)"
    return None


def _after_common(check):
    """`check`, asked only where the checks every CLML op shares (`_common`) pass."""
    return lambda nodes, caps: _common(nodes, caps) or check(nodes, caps)


def _check_softmax(nodes, caps) -> str | None:
    n = nodes[0]
    nd = n.inputs[0].type.ndim
    axis = n.attrs.get("dim", -1) % nd
    if not ((nd == 4 and axis == 1) or (nd == 2 and axis == 1)):
        return f"softmax over axis {axis} of a rank-{nd} tensor: CLML's runs over the channels (axis 1)"
    return None


def _check_pool(nodes, caps) -> str | None:
    n = nodes[0]
    if n.inputs[0].type.ndim != 4:
        return "a pool over a tensor that is not NCHW"
    if n.op in ("max_pool2d", "avg_pool2d"):
        if n.attrs.get("ceil_mode") or tuple(n.attrs.get("dilation", (1, 1))) != (1, 1):
            return "ceil mode or dilation"
        if n.op == "avg_pool2d" and any(n.attrs.get("padding", (0, 0))) and \
                n.attrs.get("count_include_pad", True) is not False:
            return "an average pool whose padding counts in the mean"
        return None
    if n.op == "adaptive_avg_pool2d":
        return None if tuple(n.attrs["output_size"]) == (1, 1) else "an adaptive pool to more than 1x1"
    axes = tuple(sorted(a % 4 for a in (n.attrs.get("axes") or ())))
    if axes != (2, 3) or not n.attrs.get("keepdim", False):
        return f"a {n.op} over axes {n.attrs.get('axes')}: CLML's global pools reduce H and W, keeping them"
    return None


def _check_cat(nodes, caps) -> str | None:
    n = nodes[0]
    if n.inputs[0].type.ndim != 4 or n.attrs["dim"] % 4 != 1:
        return "a concat that is not along the channels of NCHW tensors"
    return None


def _check_depth_to_space(nodes, caps) -> str | None:
    """reshape (1, C/b^2, b, b, H, W) -> permute (0, 1, 4, 2, 5, 3) -> reshape (1, C/b^2, H b, W b): PyTorch's
    pixel_shuffle (CRD order)."""
    r1, p, r2 = nodes
    x, mid = r1.inputs[0], r1.outputs[0]
    if x.type.ndim != 4 or mid.type.ndim != 6 or tuple(p.attrs["dims"]) != (0, 1, 4, 2, 5, 3):
        return "not a depth-to-space (pixel shuffle) reshape/permute/reshape"
    n, c, h, w = x.shape
    b = mid.shape[2]
    if mid.shape != (n, c // (b * b), b, b, h, w) or r2.outputs[0].shape != (n, c // (b * b), h * b, w * b):
        return "not a depth-to-space (pixel shuffle) reshape/permute/reshape"
    if x.dtype not in FLOATS or x.dtype not in caps.dtypes or n != 1 or max(x.shape + r2.outputs[0].shape) > MAX_DIM:
        return _common([r2], caps) or "a depth-to-space CLML does not take (dtype, batch or size)"
    return None


def _check_resize(nodes, caps) -> str | None:
    """Bilinear resize2d with align_corners or half-pixel coordinates, sampled at input/output size ratios (CLML's
    resize takes no scale of its own)."""
    n = nodes[0]
    if n.attrs.get("mode", "bilinear") != "bilinear":
        return f"a {n.attrs.get('mode')} resize: CLML resizes bilinearly"
    scales = n.attrs.get("scales")
    x, y = n.inputs[0].shape[2:], n.outputs[0].shape[2:]
    if scales and any(s and s * i != o for s, i, o in zip(scales, x, y)):
        return f"scale factors {tuple(scales)} that are not output/input {tuple(y)}/{tuple(x)}"
    return None


def _conv_chains() -> list:
    """Every fused conv chain, longest first: [pad] conv [bias add] [batch norm: mul, add | its shift alone: add
    (a scale folded into the weights)] [relu | relu6]."""
    out = []
    for conv in ("conv2d", "conv_transpose2d"):
        for pad, bias, bn, act in itertools.product((1, 0), (1, 0), (("mul", "add"), ("add",), ()),
                                                    ("relu", "hardtanh", None)):
            if (pad and conv == "conv_transpose2d") or (bn == ("add",) and not bias):
                continue
            ops = ("pad",) * pad + (conv,) + ("add",) * bias + bn + ((act,) if act else ())
            out.append(ops)
    return sorted(out, key=len, reverse=True)


PATTERNS = (
    *(Pattern("conv2d" if "conv2d" in ops else "conv2d_transpose", ops, _after_common(_check_conv))
      for ops in _conv_chains()),
    Pattern("dense", ("matmul", "add"), _after_common(_check_dense)),
    Pattern("dense", ("matmul",), _after_common(_check_dense)),
    Pattern("batch_matmul", ("matmul",), _after_common(_check_batch_matmul)),
    Pattern("batch_norm", ("mul", "add"), _after_common(_check_batch_norm)),
    Pattern("depth_to_space", ("reshape", "permute", "reshape"), _check_depth_to_space),
    *(Pattern("binary", (op,), _after_common(_check_binary)) for op in BINARY),
    Pattern("relu", ("relu",), _common),
    Pattern("clip", ("hardtanh",), _after_common(_check_clip)),
    Pattern("clip", ("clamp",), _after_common(_check_clip)),
    Pattern("pad", ("pad",), _after_common(_check_pad)),
    Pattern("concat", ("cat",), _after_common(_check_cat)),
    Pattern("softmax", ("softmax",), _after_common(_check_softmax)),
    Pattern("reshape", ("reshape",), _common),
    *(Pattern("pool", (op,), _after_common(_check_pool))
      for op in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d")),
    Pattern("global_pool", ("mean",), _after_common(_check_pool)),
    Pattern("global_pool", ("amax",), _after_common(_check_pool)),
    Pattern("resize_bilinear", ("resize2d",), _after_common(_check_resize)),
)
