"""The MXNet and ONNX frontends on the device targets (issue 25: "work on every target fxc has"): a small model
through `fxc.from_onnx(..., target=...)` against onnx's reference evaluator, and through `fxc.from_mxnet(...,
target=...)` against MXNet's own executor."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import fxc
from tests.helpers import assert_close_np

TARGETS = ["llvm", "opencl", "opengl", "webgpu"]


def _onnx_convnet(rng):
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 1, 1])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.targets(*TARGETS)
def test_from_onnx_on_target(target):
    rng = np.random.default_rng(0)
    model = _onnx_convnet(rng)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert_close_np(fxc.from_onnx(model, target=target)(x), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.targets(*TARGETS)
def test_from_mxnet_on_target(target):
    from fxc.compat.numpy_aliases import import_mxnet
    mx = import_mxnet()
    rng = np.random.default_rng(1)
    data = mx.sym.var("data")
    net = mx.sym.softmax(mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=16, name="fc1"), act_type="tanh"))
    params = {"arg:fc1_weight": rng.standard_normal((16, 12)).astype(np.float32),
              "arg:fc1_bias": rng.standard_normal(16).astype(np.float32)}
    x = rng.standard_normal((4, 12)).astype(np.float32)
    args = {"data": mx.nd.array(x), "fc1_weight": mx.nd.array(params["arg:fc1_weight"]),
            "fc1_bias": mx.nd.array(params["arg:fc1_bias"])}
    expected = net.bind(mx.cpu(), args).forward()[0].asnumpy()
    got = fxc.from_mxnet(net, params, shapes={"data": x.shape}, target=target)(x)
    assert_close_np(got, expected, rtol=1e-4, atol=1e-5)
