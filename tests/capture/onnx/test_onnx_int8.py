"""int8 ONNX models against ONNX Runtime (docs/int8.md, "Graph level and ONNX"): models that
onnxruntime.quantization writes (quantize_static in the QDQ and QOperator formats, quantize_dynamic) from a small
conv net and a small transformer-like MLP with random weights, calibrated on random data, compiled with
fxc.from_onnx on llvm. Every integer tensor the quantised model makes is compared:

- QOperator (QLinearConv, QLinearMatMul) and dynamic (DynamicQuantizeLinear, MatMulInteger): bit-exact, as fxc's
  requant="onnxruntime" and integer outputs round exactly as ONNX Runtime's kernels do;
- QDQ: within one quantisation step, at most a few percent of the values off by one: fxc computes the chain as ONNX
  defines it (float32(acc) * (sx * sw), then / sy and round), ONNX Runtime fuses it into QLinearConv, which rounds
  acc * (sx * sw / sy) once.

Also: the schemes fxc has no integer kernels for (blocked quantisation, int4 weights, asymmetric uint8 weights)
compute in float32 with one warning naming the scheme, and an exported int8 model carries int8 weights."""
import warnings
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

import fxc
from fxc.errors import QuantizationWarning

INTS = (T.UINT8, T.INT8, T.INT32)


def _init(name, a, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(a).astype(dtype), name)


def _model(nodes, x_shape, y_shape, inits, opset=17):
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, y_shape)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def convnet(rng):
    """conv(3->8, pad 1) relu, conv(8->8, stride 2, pad 1) relu, global average pool, linear(8->10)."""
    inits = [_init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))), _init("b1", rng.normal(0, 0.1, 8)),
             _init("w2", rng.normal(0, 0.2, (8, 8, 3, 3))), _init("b2", rng.normal(0, 0.1, 8)),
             _init("w3", rng.normal(0, 0.3, (8, 10))), _init("b3", rng.normal(0, 0.1, 10))]
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c2"], ["r2"]), h.make_node("GlobalAveragePool", ["r2"], ["p"]),
             h.make_node("Flatten", ["p"], ["f"]), h.make_node("MatMul", ["f", "w3"], ["m"]),
             h.make_node("Add", ["m", "b3"], ["y"])]
    return _model(nodes, [1, 3, 12, 12], [1, 10], inits)


def mlp(rng):
    """A transformer block's feed-forward: x [2, 6, 16] -> linear(16->32) relu linear(32->16) + x -> linear(16->8)."""
    inits = [_init("w1", rng.normal(0, 0.25, (16, 32))), _init("b1", rng.normal(0, 0.1, 32)),
             _init("w2", rng.normal(0, 0.2, (32, 16))), _init("b2", rng.normal(0, 0.1, 16)),
             _init("w3", rng.normal(0, 0.25, (16, 8)))]
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
             h.make_node("Relu", ["a1"], ["r1"]), h.make_node("MatMul", ["r1", "w2"], ["m2"]),
             h.make_node("Add", ["m2", "b2"], ["a2"]), h.make_node("Add", ["a2", "x"], ["s"]),
             h.make_node("MatMul", ["s", "w3"], ["y"])]
    return _model(nodes, [2, 6, 16], [2, 6, 8], inits)


MODELS = {"convnet": (convnet, (1, 3, 12, 12)), "mlp": (mlp, (2, 6, 16))}


class Reader(CalibrationDataReader):
    def __init__(self, rng, shape, n=8):
        self.data = iter([{"x": rng.normal(size=shape).astype(np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.data, None)


def quantized(tmp_path, name, how, **kwargs):
    """The model `name` quantised by onnxruntime.quantization ("QDQ", "QOperator": quantize_static calibrated on
    random data; "dynamic": quantize_dynamic), with every integer tensor it makes also a graph output."""
    rng = np.random.default_rng(0)
    make, shape = MODELS[name]
    src, out = tmp_path / f"{name}.onnx", tmp_path / f"{name}_{how}.onnx"
    onnx.save(make(rng), src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "dynamic":
            quantize_dynamic(src, out, op_types_to_quantize=["MatMul"], **kwargs)
        else:
            quantize_static(src, out, Reader(rng, shape), quant_format=QuantFormat[how],
                            op_types_to_quantize=["Conv", "MatMul"], **kwargs)
    return expose_integers(onnx.load(out))


def expose_integers(m):
    """m with each integer tensor a node makes (a quantized activation, an accumulator) also a graph output."""
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {vi.name: vi for vi in inferred.graph.value_info}
    names = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            vi = types.get(o)
            if vi is not None and vi.type.tensor_type.elem_type in INTS and o not in names:
                m.graph.output.append(vi)
                names.add(o)
    return m


def both(m, x, **options):
    """(fxc's outputs, ONNX Runtime's outputs, the QuantizationWarnings) of m on x, by output name."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fxc.from_onnx(m, **options)(x)
    got = got if isinstance(got, (list, tuple)) else [got]
    names = [o.name for o in m.graph.output]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    quant = [str(w.message) for w in caught if issubclass(w.category, QuantizationWarning)]
    return dict(zip(names, got)), dict(zip(names, want)), quant


def integer_outputs(m):
    return [o.name for o in m.graph.output if o.type.tensor_type.elem_type in INTS]


@pytest.mark.parametrize("name", ["convnet", "mlp"])
@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_qoperator_model_is_bit_exact(tmp_path, name, activations):
    m = quantized(tmp_path, name, "QOperator", per_channel=True, activation_type=QuantType[activations])
    kinds = {n.op_type for n in m.graph.node}
    assert {"QLinearMatMul"} <= kinds and (name != "convnet" or "QLinearConv" in kinds)
    x = np.random.default_rng(1).normal(size=MODELS[name][1]).astype(np.float32)
    got, want, quant = both(m, x)
    assert integer_outputs(m) and not quant
    for k in integer_outputs(m):
        assert got[k].dtype == want[k].dtype
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["convnet", "mlp"])
@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_qdq_model_is_within_one_step(tmp_path, name, activations):
    m = quantized(tmp_path, name, "QDQ", per_channel=True, activation_type=QuantType[activations])
    x = np.random.default_rng(2).normal(size=MODELS[name][1]).astype(np.float32)
    got, want, quant = both(m, x)
    assert integer_outputs(m) and not quant
    for k in integer_outputs(m):
        diff = np.abs(got[k].astype(np.int64) - want[k].astype(np.int64))
        assert got[k].dtype == want[k].dtype and diff.max() <= 1 and diff.mean() < 0.05, (k, diff.max(), diff.mean())
    scale = np.abs(want["y"]).max()
    np.testing.assert_allclose(got["y"], want["y"], atol=0.05 * scale)


@pytest.mark.parametrize("name", ["convnet", "mlp"])
def test_dynamic_model_is_bit_exact(tmp_path, name):
    m = quantized(tmp_path, name, "dynamic")
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {n.op_type for n in m.graph.node}
    x = np.random.default_rng(3).normal(size=MODELS[name][1]).astype(np.float32)
    got, want, quant = both(m, x)
    for k in integer_outputs(m):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def test_qdq_chains_compute_in_integers(tmp_path):
    """The QDQ conv net's convs and matmul become integer ops (quantized="int8", the default), and the build option
    quantized="float" keeps them in float32."""
    from fxc.capture.onnx import to_graph
    from fxc.driver.options import pass_context
    from fxc.relay_like.pipeline import run_passes
    from fxc.target import Target
    m = quantized(tmp_path, "convnet", "QDQ", per_channel=True)
    shapes = [(1, 3, 12, 12)]
    for option, want in (("int8", {"qconv2d": 2, "qmatmul": 1, "conv2d": 0}),
                         ("float", {"qconv2d": 0, "qmatmul": 0, "conv2d": 2})):    # (conv2d: conv2d_packed too)
        g = run_passes(to_graph(m, shapes), pass_context(Target.parse("llvm"), {"quantized": option}))
        ops = [n.op for n in g.nodes]
        assert {k: sum(op.startswith(k) for op in ops) for k in want} == want, ops


def test_asymmetric_weights_stay_float_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")     # (a module from the cache skips the passes, and their warning)
    m = quantized(tmp_path, "convnet", "QDQ", per_channel=False, weight_type=QuantType.QUInt8,
                  activation_type=QuantType.QUInt8)
    x = np.random.default_rng(4).normal(size=(1, 3, 12, 12)).astype(np.float32)
    got, want, quant = both(m, x)
    assert len(quant) == 1 and "uint8 weights" in quant[0], quant
    for k in integer_outputs(m):
        assert np.abs(got[k].astype(np.int64) - want[k].astype(np.int64)).max() <= 1, k


def _blocked_and_int4_model(rng):
    """y = x @ dequantize(wq int4, blocked scales of 4 rows) + x @ dequantize(w8 int8, per-column, block of 8)."""
    w4 = rng.integers(-8, 8, (16, 6))
    s4 = rng.uniform(0.01, 0.05, (4, 6)).astype(np.float32)
    w8 = rng.integers(-127, 128, (16, 6))
    s8 = rng.uniform(0.001, 0.01, (2, 6)).astype(np.float32)
    inits = [h.make_tensor("w4", T.INT4, [16, 6], w4.reshape(-1).tolist()), _init("s4", s4),
             _init("w8", w8, np.int8), _init("s8", s8)]
    nodes = [h.make_node("DequantizeLinear", ["w4", "s4"], ["d4"], axis=0, block_size=4),
             h.make_node("DequantizeLinear", ["w8", "s8"], ["d8"], axis=0, block_size=8),
             h.make_node("MatMul", ["x", "d4"], ["m4"]), h.make_node("MatMul", ["x", "d8"], ["m8"]),
             h.make_node("Add", ["m4", "m8"], ["y"])]
    return _model(nodes, [3, 16], [3, 6], inits, opset=21)


def test_int4_and_blocked_weights_compute_in_float_with_one_warning():
    m = _blocked_and_int4_model(np.random.default_rng(5))
    x = np.random.default_rng(6).normal(size=(3, 16)).astype(np.float32)
    got, want, quant = both(m, x)
    assert len(quant) == 1 and "int4 weights" in quant[0] and "per-group (blocked)" in quant[0], quant
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def test_export_carries_int8_weights(tmp_path):
    m = quantized(tmp_path, "convnet", "QDQ", per_channel=True)
    x = np.random.default_rng(7).normal(size=(1, 3, 12, 12)).astype(np.float32)
    sizes = {}
    for option in ("int8", "float"):
        module = fxc.from_onnx(m, quantized=option)
        path = fxc.export(module, tmp_path / f"{option}.fxc")
        with zipfile.ZipFile(path) as z:
            sizes[option] = z.getinfo("params.bin").file_size
        loaded = fxc.load(path)(x)
        for a, b in zip(loaded, module(x)):
            np.testing.assert_array_equal(a, b)
    # 8 * 27 + 8 * 72 + 8 * 10 weights: int8 bytes plus their scales and biases, against float32 (64-byte aligned)
    assert sizes["int8"] < 0.4 * sizes["float"], sizes
