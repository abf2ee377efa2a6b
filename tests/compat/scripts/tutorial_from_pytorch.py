"""TVM's Relay-era tutorial "Compile PyTorch Models" (tutorials/frontend/from_pytorch.py), reduced to the calls it
makes, on a small offline convolutional network (random weights) instead of torchvision's pretrained ResNet-18.

argv: output .npz (the input, TVM's output and PyTorch's).
"""
import sys

import numpy as np
import torch
import tvm
from tvm import relay
from tvm.contrib import graph_executor

out_path = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1, stride=2), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
for bn in (model[1], model[5]):             # statistics that are not the identity
    bn.running_mean.uniform_(-0.2, 0.2)
    bn.running_var.uniform_(0.5, 1.5)
    bn.weight.data.uniform_(0.5, 1.5)
model = model.eval()
input_shape = [1, 3, 32, 32]
input_data = torch.randn(input_shape, generator=torch.Generator().manual_seed(0))
scripted_model = torch.jit.trace(model, input_data).eval()

img = input_data.numpy()
input_name = "input0"
shape_list = [(input_name, img.shape)]
mod, params = relay.frontend.from_pytorch(scripted_model, shape_list)

target = tvm.target.Target("llvm", host="llvm")
dev = tvm.cpu(0)
with tvm.transform.PassContext(opt_level=3):
    lib = relay.build(mod, target=target, params=params)
m = graph_executor.GraphModule(lib["default"](dev))
m.set_input(input_name, tvm.nd.array(img.astype("float32")))
m.run()
tvm_output = m.get_output(0)
with torch.no_grad():
    output = model(torch.from_numpy(img))
print("Relay top-1 id:", int(np.argmax(tvm_output.numpy()[0])), "Torch top-1 id:", int(np.argmax(output.numpy())))
np.savez(out_path, tvm=tvm_output.numpy(), torch=output.numpy())
