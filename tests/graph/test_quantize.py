"""The quantize_chains pass (relay_like/passes/quantize.py) on small quantised graphs: the structure it makes, the
schemes it refuses (one QuantizationWarning naming them, the graph left in float), float graphs untouched, and the
rewritten graph's result against the integer ops' numpy references and the float chain it replaces."""
import warnings

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.errors import FxcError, QuantizationWarning
from fxc.ops.registry import get_op
from fxc.relay_like.builder import Builder
from fxc.relay_like.context import PassContext
from fxc.relay_like.passes import eliminate_dead_code, quantize_chains, simplify

CTX = PassContext()


def ops(g):
    return [n.op for n in g.nodes]


def f32(v):
    return np.asarray(v, np.float32)


def i32(v):
    return np.asarray(v, np.int32)


def conv_chain(rng, w_zp=0, w_dtype=np.int8, relu=True, quantize=True, bias="float"):
    """quantize(relu(add(conv2d(pad(dequantize(xq)), dequantize(wq)), b))) over a uint8 input; its parts."""
    b = Builder()
    xq = b.graph.input((1, 3, 7, 7), "uint8", "xq")
    p = dict(sx=f32(0.05), zx=i32(120), sw=f32(rng.uniform(0.002, 0.01, 4)), zw=i32(np.full(4, w_zp)),
             wq=rng.integers(-127, 128, (4, 3, 3, 3)).astype(w_dtype), sy=f32(0.08), zy=i32(100),
             bf=f32(rng.uniform(-1, 1, 4)), bi=rng.integers(-500, 500, 4).astype(np.int32))
    x = b.call("dequantize", [xq, b.const(p["sx"]), b.const(p["zx"])])
    w = b.call("dequantize", [b.const(p["wq"]), b.const(p["sw"]), b.const(p["zw"])], axis=0)
    y = b.call("conv2d", [b.call("pad", [x], pad=(1, 1, 1, 1), value=0.0, mode="constant"), w])
    if bias == "float":
        y = b.call("add", [y, b.const(p["bf"].reshape(4, 1, 1))])
    elif bias == "int32":       # ONNX QDQ: the bias is the dequantize of int32 at scale sx * sw
        bd = b.call("dequantize", [b.const(p["bi"]), b.const(p["sx"] * p["sw"]), b.const(i32(0))], axis=0)
        y = b.call("add", [y, b.call("reshape", [bd], shape=(4, 1, 1))])
    if relu in ("clamp", "hardtanh"):       # ReLU6-like: ONNX's Clip(0, hi), PyTorch's hardtanh(0, hi)
        y = b.call(relu, [y], lo=0.0, hi=2.0)
    elif relu:
        y = b.call("relu", [y])
    if quantize:
        y = b.call("quantize", [y, b.const(p["sy"]), b.const(p["zy"])], dtype="uint8")
    b.graph.outputs = [y]
    return b.graph, p


def run(g, *arrays, **options):
    return build(g, target="llvm", **options)(*arrays)


def test_conv_chain_becomes_qconv2d():
    rng = np.random.default_rng(0)
    g, p = conv_chain(rng)
    g = eliminate_dead_code(quantize_chains(g, CTX), CTX)
    assert ops(g) == ["qconv2d"]
    q = g.nodes[0]
    assert q.inputs[0] is g.inputs[0] and q.inputs[1].dtype == "int8"
    assert (q.attrs["padding"], q.attrs["relu"], q.attrs["out_dtype"], q.attrs["requant"]) == \
        ((1, 1, 1, 1), True, "uint8", "float")
    assert q.inputs[2].dtype == "float32" and q.inputs[2].shape == (4,)      # the float bias, as [O]
    xq = rng.integers(0, 256, (1, 3, 7, 7)).astype(np.uint8)
    got = run(g, xq)
    ref = get_op("qconv2d").reference(xq, p["wq"], p["bf"], p["sx"], p["zx"], p["sw"], p["zw"], p["sy"], p["zy"],
                                      padding=(1, 1), relu=True)
    np.testing.assert_array_equal(got, ref)
    # against the float chain it replaced (quantized="float"): the same values, or one step apart where the float
    # conv's sum rounds differently from the exact integer sum
    floated = run(conv_chain(np.random.default_rng(0))[0], xq, quantized="float")
    assert np.abs(floated.astype(int) - got.astype(int)).max() <= 1
    assert (floated != got).mean() < 0.05


@pytest.mark.parametrize("cap", ["clamp", "hardtanh"])
def test_a_capped_relu_folds_into_the_quantize_range(cap):
    """clamp(y, 0, 2) -> quantize: the cap becomes qmax = quantize(2.0) (quantize is monotone, so this is exact) and
    the chain one qconv2d; the values are the uncapped chain's, capped at that step."""
    rng = np.random.default_rng(1)
    g, p = conv_chain(rng, relu=cap)
    g = eliminate_dead_code(quantize_chains(g, CTX), CTX)
    assert ops(g) == ["qconv2d"]
    q = g.nodes[0]
    top = round(2.0 / 0.08) + 100
    assert (q.attrs["relu"], q.attrs["qmax"]) == (True, top)
    xq = rng.integers(0, 256, (1, 3, 7, 7)).astype(np.uint8)
    got = run(g, xq)
    uncapped = get_op("qconv2d").reference(xq, p["wq"], p["bf"], p["sx"], p["zx"], p["sw"], p["zw"], p["sy"],
                                           p["zy"], padding=(1, 1), relu=True)
    assert (uncapped > top).any() and (uncapped < top).any(), "the cap must bite for this test to mean anything"
    np.testing.assert_array_equal(got, np.minimum(uncapped, top))
    floated = run(conv_chain(np.random.default_rng(1), relu=cap)[0], xq, quantized="float")
    assert np.abs(floated.astype(int) - got.astype(int)).max() <= 1


def test_a_capped_relu_read_as_float_stays_a_float_op():
    """Without a quantize after it the cap cannot fold: the chain ends in float at the conv and the clamp stays."""
    g, _ = conv_chain(np.random.default_rng(2), relu="clamp", quantize=False)
    g = eliminate_dead_code(quantize_chains(g, CTX), CTX)
    assert ops(g) == ["qconv2d", "clamp"] and g.nodes[0].attrs["out_dtype"] == "float32"


def test_int32_bias_is_added_to_the_accumulator():
    g, p = conv_chain(np.random.default_rng(1), bias="int32", relu=False)
    g = eliminate_dead_code(quantize_chains(g, CTX), CTX)
    assert ops(g) == ["qconv2d"]
    bias = g.nodes[0].inputs[2]
    assert bias.dtype == "int32" and bias.is_const
    np.testing.assert_array_equal(bias.data, p["bi"])


def test_matmul_chain_ending_in_float():
    """linear(dequantize(a), dequantize(w) per output channel) + b, read as float: qmatmul with a float32 output."""
    rng = np.random.default_rng(2)
    b = Builder()
    aq = b.graph.input((3, 4, 16), "int8", "aq")
    wq = rng.integers(-127, 128, (8, 16)).astype(np.int8)
    sw, bias = f32(rng.uniform(0.01, 0.02, 8)), f32(rng.uniform(-1, 1, 8))
    a = b.call("dequantize", [aq, b.const(f32(0.1)), b.const(i32(-3))])
    w = b.call("dequantize", [b.const(wq), b.const(sw), b.const(i32(np.zeros(8)))], axis=0)
    y = b.call("add", [b.call("matmul", [a, w], trans_b=True), b.const(bias)])
    b.graph.outputs = [b.call("tanh", [y])]
    g = eliminate_dead_code(quantize_chains(b.graph, CTX), CTX)
    assert ops(g) == ["qmatmul", "tanh"]
    assert g.nodes[0].attrs["out_dtype"] == "float32" and g.nodes[0].attrs["trans_b"] is True
    x = rng.integers(-128, 128, (3, 4, 16)).astype(np.int8)
    ref = np.tanh(((x.astype(np.float32) + 3) * np.float32(0.1)) @ (wq.astype(np.float32) * sw[:, None]).T + bias)
    np.testing.assert_allclose(run(g, x), ref, rtol=1e-5, atol=1e-5)


def test_chain_stops_where_a_value_has_other_readers():
    """The conv's result is read twice: the integer op ends there, in float32; the add, relu and quantize stay."""
    g, _ = conv_chain(np.random.default_rng(3))
    conv = next(n for n in g.nodes if n.op == "conv2d")
    g.outputs.append(conv.outputs[0])
    g = eliminate_dead_code(quantize_chains(g, CTX), CTX)
    assert ops(g) == ["qconv2d", "add", "relu", "quantize"]
    assert g.nodes[0].attrs["out_dtype"] == "float32" and g.nodes[0].attrs["relu"] is False


@pytest.mark.parametrize("w_zp,w_dtype,scheme", [(3, np.int8, "weight zero points"),
                                                 (0, np.uint8, "uint8 weights"),
                                                 (0, np.int16, "int16 weights")])
def test_refused_scheme_stays_float_with_one_warning(w_zp, w_dtype, scheme):
    rng = np.random.default_rng(4)
    g, _ = conv_chain(rng, w_zp=w_zp, w_dtype=w_dtype)
    # a second conv of the same scheme in the graph: still one warning
    g2, _ = conv_chain(rng, w_zp=w_zp, w_dtype=w_dtype)
    g.nodes += g2.nodes
    g.outputs += g2.outputs
    before = ops(g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = quantize_chains(g, CTX)
    assert ops(g) == before
    quant = [w for w in caught if issubclass(w.category, QuantizationWarning)]
    assert len(quant) == 1 and scheme in str(quant[0].message), [str(w.message) for w in caught]


def test_quantized_float_and_float_graphs_are_left_alone():
    g, _ = conv_chain(np.random.default_rng(5))
    before = ops(g)
    assert ops(quantize_chains(g, PassContext(quantized="float"))) == before
    b = Builder()
    x = b.graph.input((1, 3, 5, 5), "float32")
    b.graph.outputs = [b.call("conv2d", [x, b.const(f32(np.ones((2, 3, 3, 3))))])]
    nodes = list(b.graph.nodes)
    assert quantize_chains(b.graph, CTX).nodes == nodes


def test_quantized_option_is_checked():
    g, _ = conv_chain(np.random.default_rng(6))
    with pytest.raises(FxcError, match="quantized='int4'.*'int8', 'float'"):
        build(g, target="llvm", quantized="int4")


@pytest.mark.parametrize("same", [True, False])
def test_max_pool_between_quantize_and_dequantize_runs_on_int8(same):
    """quantize(max_pool2d(dequantize(xq, s, z)), s, z) -> max_pool2d(xq): exact (max commutes with the monotone
    dequantize); with another scale on the quantize, the chain stays in float."""
    b = Builder()
    xq = b.graph.input((1, 4, 9, 9), "int8", "xq")
    s, z = b.const(f32(0.07)), b.const(i32(-5))
    p = b.call("max_pool2d", [b.call("dequantize", [xq, s, z])], kernel=(3, 3), stride=(2, 2), padding=(1, 1))
    b.graph.outputs = [b.call("quantize", [p, s if same else b.const(f32(0.08)), z], dtype="int8")]
    g = eliminate_dead_code(quantize_chains(b.graph, CTX), CTX)
    assert ops(g) == (["max_pool2d"] if same else ["dequantize", "max_pool2d", "quantize"])
    x = np.random.default_rng(7).integers(-128, 128, (1, 4, 9, 9)).astype(np.int8)
    want = get_op("max_pool2d").reference(x, kernel=(3, 3), stride=(2, 2), padding=(1, 1))
    if not same:
        want = get_op("quantize").reference((want.astype(np.float32) + 5) * np.float32(0.07), f32(0.08), i32(-5),
                                            dtype="int8")
    np.testing.assert_array_equal(run(g, x), want)


def test_linear_over_a_sequence_as_torch_captures_it():
    """dequantize(xq [2, 5, 16]) -> reshape [10, 16] -> matmul(trans_b) -> add -> reshape [2, 5, 8] -> relu ->
    quantize (simplify moves the relu and quantize before the reshape): one qmatmul over the reshaped int8 input."""
    rng = np.random.default_rng(8)
    b = Builder()
    xq = b.graph.input((2, 5, 16), "uint8", "xq")
    wq, sw, bias = rng.integers(-127, 128, (8, 16)).astype(np.int8), f32(rng.uniform(0.01, 0.02, 8)), \
        f32(rng.uniform(-1, 1, 8))
    x = b.call("reshape", [b.call("dequantize", [xq, b.const(f32(0.03)), b.const(i32(128))])], shape=(10, 16))
    w = b.call("dequantize", [b.const(wq), b.const(sw), b.const(i32(np.zeros(8)))], axis=0)
    y = b.call("add", [b.call("matmul", [x, w], trans_b=True), b.const(bias)])
    y = b.call("relu", [b.call("reshape", [y], shape=(2, 5, 8))])
    b.graph.outputs = [b.call("quantize", [y, b.const(f32(0.05)), b.const(i32(0))], dtype="uint8", inverse=True)]
    g = eliminate_dead_code(quantize_chains(simplify(b.graph, CTX), CTX), CTX)
    assert ops(g) == ["reshape", "qmatmul", "reshape"]
    assert g.nodes[1].attrs["relu"] and g.nodes[1].attrs["inverse"] and g.nodes[1].attrs["out_dtype"] == "uint8"
    x = rng.integers(0, 256, (2, 5, 16)).astype(np.uint8)
    want = get_op("qmatmul").reference(x.reshape(10, 16), wq, bias, f32(0.03), i32(128), sw, i32(np.zeros(8)),
                                       f32(0.05), i32(0), trans_b=True, relu=True, inverse=True)
    np.testing.assert_array_equal(run(g, x), want.reshape(2, 5, 8))
