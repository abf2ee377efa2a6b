"""use_int8 on MobileNetV2's quantised blocks: an inverted residual (1 x 1 expand, 3 x 3 depthwise, 1 x 1 project,
the residual add in int8) and a strided one, as QDQ / PT2E graphs make them. The depthwise convs become
depthwise_conv2d_i8 (no float chain: no dequantize of their input), the 1 x 1 convs the packed int8 kernels, and
every conv's output equals qconv2d's integer reference bit for bit (each stage checked on fxc's own input to it)."""
import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from tests.targets import require_runtime

f32, i32 = np.float32, np.int32


def _blocks(rng):
    """(graph, input, stages): stages[k] = (qconv2d's inputs after x, attrs, index of its x: -1 the graph input)."""
    g = Builder().graph
    x = rng.integers(0, 256, (1, 16, 14, 15)).astype(np.uint8)
    xi = g.input(x.shape, "uint8")
    stages, values = [], []

    def qconv(v, src, c, o, k, groups=1, zx=0, zy=0, **attrs):
        w = rng.integers(-128, 128, (o, c // groups, k, k)).astype(np.int8)
        ins = [w, rng.integers(-2000, 2000, o).astype(i32), f32(0.03), i32(zx),
               rng.uniform(2 ** -9, 2 ** -6, o).astype(f32), np.zeros(o, i32), f32(0.06), i32(zy)]
        attrs = dict(groups=groups, **attrs)
        y = g.call1("qconv2d", [v] + [g.const(t) for t in ins], **attrs)
        stages.append((ins, attrs, src))
        values.append(y)
        return y

    e = qconv(xi, -1, 16, 64, 1, zx=128, relu=True)                              # expand
    d = qconv(e, 0, 64, 64, 3, groups=64, padding=(1, 1), relu=True)              # depthwise, stride 1
    p = qconv(d, 1, 64, 16, 1, zy=128)                                            # project
    s = (f32(0.06), i32(128))
    r = g.call1("quantize", [g.call1("add", [g.call1("dequantize", [p, g.const(s[0]), g.const(s[1])]),
                                             g.call1("dequantize", [xi, g.const(s[0]), g.const(s[1])])]),
                             g.const(s[0]), g.const(s[1])], dtype="uint8")        # the residual add in int8
    e2 = qconv(r, -2, 16, 96, 1, zx=128, relu=True)
    d2 = qconv(e2, 3, 96, 96, 3, groups=96, padding=(1, 1), stride=(2, 2), relu=True)   # depthwise, stride 2
    qconv(d2, 4, 96, 24, 1, zy=128)
    g.outputs = values + [r]
    return g, x, stages


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_inverted_residuals_exact(target):
    require_runtime(target)
    g, x, stages = _blocks(np.random.default_rng(1))
    module = build(g, target=target)
    ks = "\n".join(module.kernels)
    assert ks.count("depthwise_conv2d_i8") >= 2 and "conv2d_packed_i8" in ks
    assert "qconv2d" not in ks and all("add" in k for k in module.kernels if "dequantize" in k)    # no float chain
    outs = module(x)
    residual = outs[-1]
    ref = all_ops()["qconv2d"].reference
    for k, (ins, attrs, src) in enumerate(stages):
        xin = x if src == -1 else residual if src == -2 else outs[src]
        np.testing.assert_array_equal(outs[k], ref(xin, *ins, **attrs), err_msg=f"stage {k}")


def test_depthwise_with_per_call_parameters():
    """Through torch.compile a PT2E model's int8 weights and scales are graph inputs: the depthwise conv still runs
    as depthwise_conv2d_i8 (it reads them per call; only the input zero point, its pad value, is built in), bit for
    bit. Before, such a conv kept the generic integer loops (~24 ms a PT2E MobileNetV2 call, 1 thread)."""
    rng = np.random.default_rng(2)
    g = Builder().graph
    x = rng.integers(0, 256, (1, 24, 15, 16)).astype(np.uint8)
    ins = [rng.integers(-128, 128, (24, 1, 3, 3)).astype(np.int8), rng.uniform(-1, 1, 24).astype(f32), f32(0.03),
           i32(131), rng.uniform(2 ** -9, 2 ** -6, 24).astype(f32), np.zeros(24, i32), f32(0.06), i32(2)]
    live = [0, 1, 2, 4, 6]                  # weight, bias and scales: graph inputs; zero points: constants
    xi = g.input(x.shape, "uint8")
    vals = [g.input(t.shape, str(t.dtype)) if k in live else g.const(t) for k, t in enumerate(ins)]
    attrs = dict(groups=24, padding=(1, 1), stride=(2, 2), relu=True, inverse=True)
    g.outputs = [g.call1("qconv2d", [xi] + vals, **attrs)]
    module = build(g, target="llvm")
    assert "depthwise_conv2d_i8" in "\n".join(module.kernels) and "qconv2d" not in "\n".join(module.kernels)
    got = module(x, *[ins[k] for k in live])
    np.testing.assert_array_equal(got, all_ops()["qconv2d"].reference(x, *ins, **attrs))
