"""A numpy interpreter of CLML's serialised region graph (docs/byoc.md, "The CLML region graph"): the meaning of
what fxc's CLML codegen writes, checked without an Adreno device. Written from the format's description, apart from
fxc's ops (it does not call fxc's op references), so a codegen that drops a pad, a bias or a batch norm, swaps
padding sides or mislabels an activation gives a different answer.

    outs = run(graph, operands)     # graph: the parsed JSON; operands: arrays in graph["operands"] order, or a
                                    # dict name -> array for the inputs; returns the outputs ("out<k>") in order

Float16 graphs compute in float16 (as CL_HALF_FLOAT), accumulating convolutions in float32 as Adreno does.
"""
from __future__ import annotations

import numpy as np

FORMAT, VERSION = "fxc.clml.region", 1


def _nchw(x: np.ndarray) -> np.ndarray:
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


def _channel(v: np.ndarray, c: int) -> np.ndarray:
    return v.reshape(1, c, 1, 1)


def _act(y, mode):
    if mode == "relu":
        return np.maximum(y, 0)
    if mode == "relu6":
        return np.clip(y, 0, 6)
    assert mode is None, mode
    return y


def _conv(x, w, stride, dilation, padding, groups):
    """NCHW x OIHW convolution, zero padding [top, left, bottom, right], groups."""
    t, left, b, r = padding
    x = np.pad(x.astype(np.float32), ((0, 0), (0, 0), (t, b), (left, r)))
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), np.float32)
    og = o // groups
    for g in range(groups):
        xs = x[:, g * ci:(g + 1) * ci]
        ws = w[g * og:(g + 1) * og].astype(np.float32)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


def _transposed_conv(x, w, stride, padding):
    """NCHW x (I, O, kh, kw) transposed convolution: each input pixel scatters its weighted kernel."""
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    sh, sw = stride
    full = np.zeros((n, o, (h - 1) * sh + kh, (wd - 1) * sw + kw), np.float32)
    for i in range(kh):
        for j in range(kw):
            full[:, :, i:i + sh * (h - 1) + 1:sh, j:j + sw * (wd - 1) + 1:sw] += \
                np.einsum("nchw,co->nohw", x.astype(np.float32), w[:, :, i, j].astype(np.float32))
    t, left, b, r = padding
    return full[:, :, t:full.shape[2] - b, left:full.shape[3] - r]


def _pool(x, mode, window, stride, padding):
    t, left, b, r = padding
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x.astype(np.float32), ((0, 0), (0, 0), (t, b), (left, r)), constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:], np.float32), ((t, b), (left, r)))
    kh, kw = window
    sh, sw = stride
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    win = [xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw] for i in range(kh) for j in range(kw)]
    if mode == "max":
        return np.max(win, axis=0)
    count = sum(ones[i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw] for i in range(kh) for j in range(kw))
    return np.sum(win, axis=0) / count          # padding excluded from the mean


def _resize_bilinear(x, size, mode):
    """Bilinear resampling of NCHW x to size (h, w): source coordinate s = d (n - 1) / (m - 1) for
    "align_corners", (d + 1/2) n / m - 1/2 for "half_pixel"; taps floor(s) and floor(s) + 1, each clamped into
    the image, weighted by the fraction of s."""
    x = x.astype(np.float64)
    for ax, m in ((2, size[0]), (3, size[1])):
        n, d = x.shape[ax], np.arange(m, dtype=np.float64)
        s = d * ((n - 1) / (m - 1) if m > 1 else 0.0) if mode == "align_corners" else (d + 0.5) * n / m - 0.5
        f = np.floor(s)
        lo, hi = np.clip(f, 0, n - 1).astype(int), np.clip(f + 1, 0, n - 1).astype(int)
        t = (s - f).reshape((-1, 1) if ax == 2 else (-1,))
        x = np.take(x, lo, axis=ax) * (1 - t) + np.take(x, hi, axis=ax) * t
    return x


def _node(node: dict, env: dict, dtype, shape):
    op, a, ins = node["op"], node["attrs"], {k: env[v] for k, v in node["inputs"].items()}
    if op in ("convolution", "transposed_convolution"):
        x, w = ins["input"], ins["weight"]
        if op == "convolution":
            y = _conv(x, w, a["stride"], a["dilation"], a["padding"], a["groups"])
        else:
            y = _transposed_conv(x, w, a["stride"], a["padding"])
        c = y.shape[1]
        if "bias" in ins:
            y = y + _channel(ins["bias"], c)
        if "bn_scale" in ins:
            y = y * _channel(ins["bn_scale"], c)
        if "bn_shift" in ins:
            y = y + _channel(ins["bn_shift"], c)
        return _act(y, a["activation"])
    if op == "fully_connected":
        w = ins["weight"].astype(np.float32)
        y = ins["input"].astype(np.float32) @ (w.T if a["transpose_weight"] else w)
        return y + ins["bias"].reshape(1, -1) if "bias" in ins else y
    if op == "batch_matmul":
        b = ins["weight"].astype(np.float32)
        return ins["input"].astype(np.float32) @ (b.transpose(0, 2, 1) if a["transpose_weight"] else b)
    if op == "batchnorm":
        c = ins["input"].shape[1]
        return ins["input"] * _channel(ins["scale"], c) + _channel(ins["shift"], c)
    if op == "binary":
        x, y = ins["a"], ins["b"]
        assert x.shape == y.shape, "CLML's binary ops take equal shapes"
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
                "min": np.minimum}[a["mode"]](x, y)
    if op == "activation":
        x = ins["input"]
        return np.clip(x, a["lo"], a["hi"]) if a["mode"] == "clip" else _act(x, a["mode"])
    if op == "pad":
        return np.pad(ins["input"], [tuple(p) for p in a["widths"]], constant_values=a["value"])
    if op == "concat":
        return np.concatenate([ins[f"input{i}"] for i in range(len(ins))], axis=a["axis"])
    if op == "softmax":
        x = ins["input"].astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if op == "reshape":
        return ins["input"]             # (the output's declared shape is applied by run)
    if op == "pool":
        return _pool(_nchw(ins["input"]), a["mode"], a["window"], a["stride"], a["padding"])
    if op == "global_pool":
        x = _nchw(ins["input"]).astype(np.float32)
        return x.max(axis=(2, 3), keepdims=True) if a["mode"] == "max" else x.mean(axis=(2, 3), keepdims=True)
    if op == "depth_to_space":
        x, bs = ins["input"], a["block"]
        n, c, h, w = x.shape
        assert a["mode"] == "CRD"
        return x.reshape(n, c // bs ** 2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // bs ** 2,
                                                                                               h * bs, w * bs)
    if op == "resize_bilinear":
        assert a["mode"] in ("align_corners", "half_pixel"), a["mode"]
        return _resize_bilinear(_nchw(ins["input"]), shape[-2:], a["mode"])
    raise AssertionError(f"the region graph names an op the format does not define: {op}")


def run(graph: dict, operands) -> list:
    """The region's outputs, computed from its operands (in graph["operands"] order, or a dict by name)."""
    assert graph["format"] == FORMAT and graph["version"] == VERSION, "not a CLML region graph this reads"
    tensors, dtype = graph["tensors"], np.dtype(graph["dtype"])
    names = operands if isinstance(operands, dict) else dict(zip(graph["operands"], operands))
    env = {}
    for name, spec in tensors.items():
        if name.startswith("in"):
            env[name] = np.asarray(names[name], dtype=spec["dtype"]).reshape(spec["shape"])
    for node in graph["nodes"]:
        spec = tensors[node["output"]]
        y = np.asarray(_node(node, env, dtype, spec["shape"]))
        assert y.size == int(np.prod(spec["shape"])), (node["fxc"], y.shape, spec["shape"])
        env[node["output"]] = y.astype(dtype).reshape(spec["shape"])    # (each op's result in the region's precision)
    return [env[name] for name in graph["operands"] if name.startswith("out")]
