"""resize2d: PyTorch's bilinear and nearest upsampling (F.interpolate) captured by fxc.from_torch as one
resize2d op, not decomposed into index arithmetic, and equal to eager on the host and OpenCL."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fxc
from fxc.capture.torch.aot import capture
from fxc.ops.registry import all_ops
from tests.helpers import assert_close_np

CASES = {
    "bilinear_x2": dict(scale_factor=2, mode="bilinear", align_corners=False),
    "bilinear_x2_align": dict(scale_factor=2, mode="bilinear", align_corners=True),
    "bilinear_odd": dict(size=(7, 5), mode="bilinear", align_corners=False),
    "bilinear_odd_align": dict(size=(7, 5), mode="bilinear", align_corners=True),
    "bilinear_scale_1_5": dict(scale_factor=1.5, mode="bilinear", align_corners=False),
    "bilinear_down": dict(size=(2, 3), mode="bilinear", align_corners=False),
    "nearest_x2": dict(scale_factor=2, mode="nearest"),
    "nearest_odd": dict(size=(7, 9), mode="nearest"),
    "nearest_scale_1_5": dict(scale_factor=1.5, mode="nearest"),
}


class Up(torch.nn.Module):
    def __init__(self, kw):
        super().__init__()
        self.kw = kw

    def forward(self, x):
        return F.interpolate(x, **self.kw) * 2.0


def _x():
    return torch.randn(1, 3, 5, 6, generator=torch.Generator().manual_seed(0))


@pytest.mark.targets("llvm", "opencl")
@pytest.mark.parametrize("name", sorted(CASES))
def test_interpolate_from_torch_matches_eager(name, target):
    model, x = Up(CASES[name]), _x()
    compiled = fxc.from_torch(model, (x,), target=target)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(compiled(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_upsample_is_captured_whole(name):
    gm, _ = capture(Up(CASES[name]), (_x(),))
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert any(t.startswith(("aten.upsample_bilinear2d", "aten.upsample_nearest2d")) for t in targets), targets
    assert "aten.index.Tensor" not in targets


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_matches_eager(name):
    """The numpy reference through the ATen converters' attributes, against torch eager (float64)."""
    kw, x = CASES[name], _x().double()
    expected = F.interpolate(x, **kw).numpy()
    mode, size = kw["mode"], expected.shape[2:]
    scale = kw.get("scale_factor")
    scales = None if scale is None or kw.get("align_corners") else (float(scale), float(scale))
    coord = "asymmetric" if mode == "nearest" else ("align_corners" if kw["align_corners"] else "half_pixel")
    got = all_ops()["resize2d"].reference(x.numpy(), size=size, mode=mode, coord=coord, scales=scales)
    assert_close_np(got, expected)
    assert np.abs(got - expected).max() < 1e-12


ONNX_CASES = [("half_pixel", "sizes", [1, 2, 7, 5]), ("half_pixel", "scales", [1, 1, 2, 1.5]),
              ("pytorch_half_pixel", "sizes", [1, 2, 3, 8]), ("align_corners", "sizes", [1, 2, 9, 4]),
              ("align_corners", "scales", [1, 1, 2, 2])]


@pytest.mark.parametrize("ctm,given,values", ONNX_CASES, ids=[f"{c}-{g}" for c, g, _ in ONNX_CASES])
def test_onnx_linear_resize_is_resize2d_and_matches_the_reference(ctm, given, values):
    from onnx import TensorProto as T, helper as h
    from onnx.reference import ReferenceEvaluator

    from fxc.capture.onnx import to_graph
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 6)).astype(np.float32)
    const = h.make_tensor(given, T.INT64 if given == "sizes" else T.FLOAT, [4], values)
    ins = ["x", "", "scales"] if given == "scales" else ["x", "", "", "sizes"]
    node = h.make_node("Resize", ins, ["y"], mode="linear", coordinate_transformation_mode=ctm)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, x.shape)],
                         [h.make_tensor_value_info("y", T.FLOAT, [int(n * v) for n, v in zip(x.shape, values)]
                                                   if given == "scales" else values)], initializer=[const])
    graph.initializer[0].name = given
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    assert [n.op for n in to_graph(model, [x.shape]).nodes] == ["resize2d"]
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = fxc.from_onnx(model).module(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert_close_np(np.asarray(got), expected)
