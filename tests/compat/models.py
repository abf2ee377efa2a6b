"""Small offline models for the facade's tests, with random weights: an MXNet Gluon ResNet-18 (as a checkpoint too),
an ONNX super-resolution network (written with onnx.helper), a PyTorch CNN. Each comes with its framework's own
output, which the tests compare the facade's with."""
from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from fxc.compat.numpy_aliases import import_mxnet
from fxc.testing.mxnet_zoo import make_gluon


def gluon_resnet(size: int = 32):
    """(HybridBlock, input x (numpy), MXNet's output) of resnet18_v1 at size x size, non-trivial BatchNorm."""
    mx = import_mxnet()
    net, x = make_gluon("resnet18_v1", size=size)
    x = x.asnumpy() if hasattr(x, "asnumpy") else np.asarray(x)
    return net, x, net(mx.nd.array(x)).asnumpy()


def symbol_params(net):
    """(symbol on "data", arg_params, aux_params) of a Gluon block, as mx.model.save_checkpoint takes them."""
    mx = import_mxnet()
    sym = net(mx.sym.var("data"))
    params = net.collect_params()
    arg = {k: p.data() for k, p in params.items() if "running" not in k}
    aux = {k: p.data() for k, p in params.items() if "running" in k}
    return sym, arg, aux


def super_resolution(seed: int = 0, size: int = 32, scale: int = 3):
    """An ONNX ModelProto: 1-channel image -> conv 5x5 / relu / conv 3x3 / relu / conv 3x3 -> DepthToSpace(scale)."""
    rng = np.random.default_rng(seed)
    chans = [(1, 8, 5), (8, 8, 3), (8, scale * scale, 3)]
    inits, nodes, x = [], [], "input"
    for i, (cin, cout, k) in enumerate(chans):
        w = rng.normal(0, (2 / (cin * k * k)) ** 0.5, (cout, cin, k, k)).astype(np.float32)
        b = rng.normal(0, 0.1, cout).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4))
        x = f"c{i}"
        if i < len(chans) - 1:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    nodes.append(helper.make_node("DepthToSpace", [x], ["output"], blocksize=scale))
    graph = helper.make_graph(nodes, "super_resolution",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, size, size])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                             [1, 1, size * scale, size * scale])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def onnx_reference(model, x: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(model).run(None, {model.graph.input[0].name: x})[0]


def torch_cnn(seed: int = 0) -> torch.nn.Module:
    """conv/bn/relu/pool/conv/bn/relu/pool/linear, eval mode, BatchNorm statistics that are not the identity."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    for bn in (model[1], model[5]):
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.data.uniform_(0.5, 1.5)
    return model.eval()
