"""A float16 ONNX model (torch.onnx.export of a .half() ResNet-18, small input) through fxc.from_onnx: float16 in and
out, computed in float32 between them as ONNX Runtime's CPU provider computes it (equal outputs), and as accurate as
ONNX Runtime against a float64 run of the model."""
import io

import numpy as np
import onnx
import onnxruntime
import torch

import fxc
from fxc.testing import resnet18


def test_float16_resnet18_matches_onnx_runtime_and_float64():
    torch.manual_seed(0)
    model = resnet18(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        exact = model.double()(x.double()).numpy()
    f = io.BytesIO()
    torch.onnx.export(model.half(), (x.half(),), f, input_names=["x"], output_names=["y"], dynamo=False)
    proto = onnx.load_from_string(f.getvalue())
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    xh = x.half().numpy()
    got = fxc.from_onnx(proto)(xh)
    ort = onnxruntime.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": xh})[0]
    assert got.dtype == ort.dtype == np.float16 and got.shape == ort.shape
    err_fxc, err_ort = (np.abs(a.astype(np.float64) - exact).max() for a in (got, ort))
    assert err_fxc <= 2 * err_ort + 2.0 ** -11 * np.abs(exact).max(), (err_fxc, err_ort)
    np.testing.assert_allclose(got.astype(np.float32), ort.astype(np.float32), rtol=0, atol=4 * 2.0 ** -11)
