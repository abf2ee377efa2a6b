"""The quantised ops (fxc/ops/quant.py: quantize, dequantize, qconv2d, qmatmul) on every target against their numpy
integer references, the saturation edges included (255 / 0, 127 / -128, zero points at the ends of the range,
scales 2^-20 and 2^4); ONNX models that onnxruntime.quantization writes on every target against ONNX Runtime (a
quantize_static QDQ conv net exported from torch, within one output step; tests/capture/onnx/test_onnx_int8.py's
QOperator conv net and dynamic MLP, every integer tensor bit-exact); and a device without 32-bit integer arithmetic
refusing qmatmul (torch.compile then runs in eager); and the byte tensors of a symbolic batch (row launches at byte
offsets that are not whole words: rows of 7 and 33 bytes)."""
import dataclasses

import numpy as np
import pytest

import fxc
from fxc.backends import fill
from fxc.driver.build import build
from fxc.errors import LoweringError
from fxc.ops.registry import get_op
from fxc.relay_like.graph import Graph
from fxc.symbolic.expr import Sym
from fxc.symbolic.sym import SymInfo
from tests.capture.onnx.test_onnx_int8 import MODELS, both, integer_outputs, quantized
from tests.helpers_devices import sample_graph
from tests.targets import DEVICE_TARGETS

QUANT_OPS = ("quantize", "dequantize", "qconv2d", "qmatmul")


def _f32(v):
    return np.asarray(v, np.float32)


def _i32(v):
    return np.asarray(v, np.int32)


def _edges():
    """(op, inputs, attrs) at the ends of the integer ranges, beside the ops' own samples."""
    rng = np.random.default_rng(7)
    ramp = np.linspace(-300, 300, 97).astype(np.float32)
    u_ends = np.array([[0, 255, 0, 255], [255, 255, 0, 0]], np.uint8)
    s_ends = np.array([[-128, 127, -127, 0], [127, -128, 127, -128]], np.int8)
    x = rng.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)
    w = rng.choice(np.array([-128, -127, 127, 0], np.int8), size=(4, 3, 3, 3))
    zero4 = np.zeros(4, np.int32)
    return [
        ("quantize", [ramp, _f32(2.0 ** -20), _i32(0)], {"dtype": "uint8"}),           # everything saturates
        ("quantize", [ramp * 2.0 ** -20, _f32(2.0 ** -20), _i32(255)], {"dtype": "uint8"}),
        ("quantize", [ramp * 16, _f32(2.0 ** 4), _i32(127)], {"dtype": "int8"}),
        ("quantize", [ramp, _f32(2.0 ** 4), _i32(-128)], {"dtype": "int8", "inverse": True}),
        ("dequantize", [u_ends, _f32(2.0 ** 4), _i32(255)], {}),
        ("dequantize", [s_ends, _f32([2.0 ** -20, 2.0 ** 4]), _i32([-128, 127])], {"axis": 0}),
        # x_zp 255 and 0: every tap (x - zp) at its extreme; weights at +-127 / -128; outputs saturating both ways
        ("qconv2d", [x, w, zero4, _f32(2.0 ** 4), _i32(255), _f32(2.0 ** -20) * np.ones(4, np.float32), zero4,
                     _f32(2.0 ** -20), _i32(0)], {"padding": (1, 1), "out_dtype": "uint8"}),
        ("qconv2d", [x, w, np.array([2 ** 20, -2 ** 20, 0, 7], np.int32), _f32(1.0), _i32(0),
                     _f32([1.0, 0.5, 2.0, 1.0]), zero4, _f32(2.0 ** 4), _i32(-128)],
         {"stride": (2, 2), "out_dtype": "int8", "requant": "onnxruntime"}),
        ("qmatmul", [np.full((3, 300), 255, np.uint8), np.full((300, 5), -128, np.int8), np.zeros(5, np.int32),
                     _f32(2.0 ** 4), _i32(0), _f32(2.0 ** 4), np.zeros(5, np.int32), _f32(2.0 ** -20), _i32(127)],
         {"out_dtype": "int8"}),                                              # acc -9,792,000: saturates at -128
        ("qmatmul", [np.full((2, 64), 0, np.uint8), rng.integers(-128, 128, (5, 64)).astype(np.int8),
                     np.zeros(5, np.int32), _f32(0.5), _i32(255), _f32(2.0 ** -20), np.zeros(5, np.int32), _f32(1.0),
                     _i32(0)], {"trans_b": True, "out_dtype": "int32"}),
    ]


def _check(target: str, name: str, arrays, attrs) -> None:
    op = get_op(name)
    got = build(sample_graph(name, arrays, attrs), target=target)(*arrays)
    want = np.asarray(op.reference(*arrays, **attrs))
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind == "f":      # float32 results: the same operations in the same order, rounded alike
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * max(1.0, float(np.abs(want).max())))
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {attrs}")


@pytest.mark.targets(*DEVICE_TARGETS)       # llvm's: tests/ops/test_ops.py, tests/capture/onnx/test_onnx_int8.py
@pytest.mark.parametrize("name", QUANT_OPS)
def test_quant_op_samples_equal_the_integer_reference(target, name):
    for arrays, attrs in get_op(name).samples(np.random.default_rng(0)):
        _check(target, name, arrays, attrs)


@pytest.mark.all_targets
def test_quant_ops_at_the_saturation_edges(target):
    for name, arrays, attrs in _edges():
        _check(target, name, arrays, attrs)


@pytest.mark.targets("opencl", "opengl")
def test_qmatmul_refused_without_32bit_integers(target):
    """A device without wrapping 32-bit integers (Caps.int32_ops) refuses the int32 accumulation, naming it."""
    t = fill(target)
    t = t.with_caps(dataclasses.replace(t.caps, int32_ops=False))
    arrays, attrs = get_op("qmatmul").samples(np.random.default_rng(0))[0]
    with pytest.raises(LoweringError, match=r"needs Caps.int32_ops \(it computes int32"):
        build(sample_graph("qmatmul", arrays, attrs), target=t)


class _Net:
    """A small conv net as quantize_static writes it (QDQ: uint8 activations, per-channel int8 weights): two convs
    with relu (the second grouped and strided), a max pool and a linear layer."""

    @staticmethod
    def make(folder):
        import onnx
        import torch
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
                self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
                self.fc = torch.nn.Linear(8 * 4 * 4, 10)

            def forward(self, x):
                x = torch.relu(self.c2(torch.relu(self.c1(x))))
                return self.fc(torch.nn.functional.max_pool2d(x, 2).flatten(1))

        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        plain, quant = folder / "net.onnx", folder / "net_int8.onnx"
        torch.onnx.export(Net().eval(), (torch.randn(1, 3, 16, 16),), str(plain), dynamo=False, opset_version=17,
                          input_names=["x"])

        class Calibration(CalibrationDataReader):
            def __init__(self):
                self.data = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

            def get_next(self):
                return next(self.data, None)
        quantize_static(str(plain), str(quant), Calibration(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        model = onnx.load(str(quant))
        last = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
        scale = onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == last.input[1]))
        return quant, float(scale)


@pytest.fixture(scope="module")
def quantized_net(tmp_path_factory):
    return _Net.make(tmp_path_factory.mktemp("qnet"))


@pytest.mark.all_targets
def test_quantized_onnx_net_matches_onnxruntime(target, quantized_net):
    """fxc.from_onnx of the QDQ model on `target` against ONNX Runtime's CPU kernels on the same model: within one
    step of the output's quantisation (docs/int8.md: where the two round alike, equal)."""
    import onnxruntime as ort
    path, step = quantized_net
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(2)])
    model = fxc.from_onnx(str(path), target=target)
    got = np.concatenate([model(x[i:i + 1]) for i in range(2)])
    ints = ("qconv2d", "conv2d_packed_i8")      # the integer path: generic, or CPU's packed kernels
    assert any(k in line for line in model.module.kernels for k in ints), model.module.kernels
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.abs(got - want).max() <= step * 1.001, (np.abs(got - want).max(), step)
    assert np.abs(want).max() > 4 * step            # the comparison is not of zeros


@pytest.mark.targets(*DEVICE_TARGETS)       # llvm's: tests/ops/test_ops.py, tests/capture/onnx/test_onnx_int8.py
@pytest.mark.parametrize("name, how", [("convnet", "QOperator"), ("mlp", "dynamic")])
def test_onnx_integer_models_are_bit_exact(target, tmp_path, name, how):
    """QLinearConv / QLinearMatMul (requant="onnxruntime") and DynamicQuantizeLinear + MatMulInteger on `target`:
    every integer tensor the model makes equals ONNX Runtime's."""
    m = quantized(tmp_path, name, how, **({"per_channel": True} if how == "QOperator" else {}))
    x = np.random.default_rng(1).normal(size=MODELS[name][1]).astype(np.float32)
    got, want, quant = both(m, x, target=target)
    assert integer_outputs(m) and not quant
    for k in integer_outputs(m):
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.targets("llvm", "opencl", "opengl", "webgpu", "webgl", "wasm")
def test_quantized_rows_of_a_symbolic_batch(target):
    """quantize -> qmatmul (int8 out) -> dequantize over a symbolic batch, built once: every size equals the
    references, blocks of rows and single rows alike (an int8 row of 7 bytes starts mid-word)."""
    rng = np.random.default_rng(3)
    k, n = 33, 7
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    rest = [np.zeros(n, np.int32), _f32(0.05), _i32(3), _f32(np.linspace(0.001, 0.01, n)), np.zeros(n, np.int32),
            _f32(0.2), _i32(-5)]
    g = Graph()
    x = g.input((Sym("batch"), k), "float32", "x")
    q = g.call1("quantize", [x, Graph.const(_f32(0.05)), Graph.const(_i32(3))], dtype="uint8")
    y = g.call1("qmatmul", [q, Graph.const(w)] + [Graph.const(a) for a in rest], trans_b=True, out_dtype="int8")
    g.outputs = [q, y, g.call1("dequantize", [y, Graph.const(_f32(0.2)), Graph.const(_i32(-5))])]
    g.symbols = {"batch": SymInfo("batch", 1, 40)}
    module = build(g, target=target)
    assert module.symbols
    for rows in (9, 1, 8, 13, 40):
        xs = (rng.standard_normal((rows, k)) * 4).astype(np.float32)
        want_q = get_op("quantize").reference(xs, _f32(0.05), _i32(3), dtype="uint8")
        want_y = get_op("qmatmul").reference(want_q, w, *rest, trans_b=True, out_dtype="int8")
        want = (want_q, want_y, get_op("dequantize").reference(want_y, _f32(0.2), _i32(-5)))
        for got, exp in zip(module(xs), want):
            np.testing.assert_array_equal(got, exp, err_msg=f"{rows} rows")
