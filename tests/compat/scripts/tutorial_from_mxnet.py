"""TVM's Relay-era tutorial "Compile MXNet Models" (tutorials/frontend/from_mxnet.py), reduced to the calls it makes,
on an offline Gluon network with random weights instead of the pretrained download.

argv: output .npz. Writes the softmax of the Gluon block's output (built from the block) and the output of the same
network saved and loaded as a checkpoint (built from the symbol), for the test to compare with MXNet.
"""
import sys

import mxnet as mx
import numpy as np
import tvm
import tvm.relay as relay
from mxnet.gluon.model_zoo.vision import get_model
from tvm.contrib import graph_executor

out_path = sys.argv[1]
target, dev = "llvm", tvm.cpu(0)

block = get_model("resnet18_v1", pretrained=False, classes=10)
block.initialize(mx.init.Xavier(), ctx=mx.cpu())
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (1, 3, 32, 32)).astype("float32")
block(mx.nd.array(x))
for name, p in block.collect_params().items():       # statistics that are not the identity
    if name.endswith(("running_mean", "beta")):
        p.set_data(mx.nd.array(rng.normal(0, 0.1, p.shape)))
    elif name.endswith(("running_var", "gamma")):
        p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))

# the block itself, with a softmax added around its body
shape_dict = {"data": x.shape}
mod, params = relay.frontend.from_mxnet(block, shape_dict)
func = mod["main"]
func = relay.Function(func.params, relay.nn.softmax(func.body), None, func.type_params, func.attrs)
with tvm.transform.PassContext(opt_level=3):
    lib = relay.build(func, target, params=params)
m = graph_executor.GraphModule(lib["default"](dev))
m.set_input("data", tvm.nd.array(x.astype("float32")))
m.run()
probabilities = m.get_output(0).numpy()
print("top-1 of the block:", int(np.argmax(probabilities[0])))

# the same network as a symbol with its arg_params, through a checkpoint
data = mx.sym.Variable("data")
sym = block(data)
args = {k: mx.nd.array(v.data().asnumpy()) for k, v in block.collect_params().items() if "running" not in k}
auxs = {k: mx.nd.array(v.data().asnumpy()) for k, v in block.collect_params().items() if "running" in k}
mx.model.save_checkpoint(out_path + "-resnet18_v1", 0, sym, args, auxs)
mx_sym, args, auxs = mx.model.load_checkpoint(out_path + "-resnet18_v1", 0)
mod, relay_params = relay.frontend.from_mxnet(mx_sym, shape_dict, arg_params=args, aux_params=auxs)
with tvm.transform.PassContext(opt_level=3):
    lib = relay.build(mod, target, params=relay_params)
m = graph_executor.GraphModule(lib["default"](dev))
m.set_input("data", tvm.nd.array(x))
m.run()
logits = m.get_output(0).numpy()
np.savez(out_path, x=x, probabilities=probabilities, logits=logits, mxnet=block(mx.nd.array(x)).asnumpy())
