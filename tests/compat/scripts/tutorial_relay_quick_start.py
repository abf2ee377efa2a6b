"""TVM's Relay-era "Quick Start Tutorial for Compiling Deep Learning Models" (tutorials/get_started/
relay_quick_start.py), reduced to the calls it makes: relay.testing's ResNet-18 with random weights (a 32x32 image
and 10 classes, to stay quick), built, run, exported, loaded back and compared.

argv: target ("llvm" or "cuda"), output .npy.
"""
import sys

import numpy as np
import tvm
import tvm.testing
from tvm import relay, te  # noqa: F401  (the tutorial imports te)
from tvm.contrib import graph_executor
from tvm.relay import testing  # noqa: F401  (makes relay.testing importable, as the tutorial does)

target_name, out_path = sys.argv[1], sys.argv[2]
batch_size, num_class = 1, 10
image_shape = (3, 32, 32)
data_shape = (batch_size,) + image_shape
out_shape = (batch_size, num_class)
mod, params = relay.testing.resnet.get_workload(num_layers=18, batch_size=batch_size, image_shape=image_shape,
                                                num_classes=num_class)
print(mod.astext(show_meta_data=False)[:400])

opt_level = 3
target = tvm.target.cuda() if target_name == "cuda" else tvm.target.Target(target_name)
with tvm.transform.PassContext(opt_level=opt_level):
    lib = relay.build(mod, target, params=params)

dev = tvm.cuda() if target_name == "cuda" else tvm.cpu()
data = np.random.uniform(-1, 1, size=data_shape).astype("float32")
module = graph_executor.GraphModule(lib["default"](dev))
module.set_input("data", data)
module.run()
out = module.get_output(0, tvm.nd.empty(out_shape)).numpy()
print(out.flatten()[0:10])

from tvm.contrib import utils  # noqa: E402  (where the tutorial imports it)

temp = utils.tempdir()
path_lib = temp.relpath("deploy_lib.tar")
lib.export_library(path_lib)
print(temp.listdir())
loaded_lib = tvm.runtime.load_module(path_lib)
input_data = tvm.nd.array(data)
module = graph_executor.GraphModule(loaded_lib["default"](dev))
module.run(data=input_data)
out_deploy = module.get_output(0).numpy()
tvm.testing.assert_allclose(out_deploy, out, atol=1e-5)
np.savez(out_path, data=data, out=out, out_deploy=out_deploy)
