"""TVM's Relay-era tutorial "Compile ONNX Models" (tutorials/frontend/from_onnx.py), reduced to the calls it makes, on
an offline super-resolution network (written by the test, random weights) instead of the download.

argv: the .onnx model, the input image (.png, a grey 32x32 picture), output .npy (the upscaled luminance).
"""
import sys

import numpy as np
import onnx
import tvm
import tvm.relay as relay
from PIL import Image
from tvm import te  # noqa: F401  (the tutorial imports it)

model_path, image_path, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
onnx_model = onnx.load(model_path)
img_y = Image.open(image_path).convert("YCbCr").split()[0]
x = np.array(img_y)[np.newaxis, np.newaxis, :, :]

target = "llvm"
input_name = onnx_model.graph.input[0].name
shape_dict = {input_name: x.shape}
mod, params = relay.frontend.from_onnx(onnx_model, shape_dict)
with tvm.transform.PassContext(opt_level=1):
    executor = relay.build_module.create_executor("graph", mod, tvm.cpu(0), target, params).evaluate()
tvm_output = executor(tvm.nd.array(x.astype("float32"))).numpy()
out_y = Image.fromarray(np.uint8((tvm_output[0, 0]).clip(0, 255)), mode="L")
print("upscaled to", out_y.size)
np.save(out_path, tvm_output)
