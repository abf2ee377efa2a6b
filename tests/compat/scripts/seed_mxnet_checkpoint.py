"""The seed article's deployment script, reduced: an MXNet checkpoint -> relay -> build -> graph runtime -> timing.

Written for TVM's Relay era and unchanged but for its inputs (argv instead of fixed paths, an .npy written at the
end): tests/compat/test_tutorials.py runs it with `import fxc.compat.tvm.install` added on top, and unchanged through
`python -m fxc.compat.tvm`. argv: checkpoint prefix, epoch, image file, target, output .npy.
"""
import sys
import time

import mxnet as mx
import numpy as np
import tvm
from PIL import Image
from tvm import relay
from tvm.contrib import graph_runtime

prefix, epoch, image_path, target, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

# the checkpoint, as MXNet saved it
mx_sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, epoch)
image = Image.open(image_path)
shape_dict = {"data": (1, 3, image.size[1], image.size[0])}
relay_func, relay_params = relay.frontend.from_mxnet(mx_sym, shape_dict, arg_params=arg_params,
                                                     aux_params=aux_params)

with relay.build_config(opt_level=3):
    graph, lib, params = relay.build(relay_func, target, params=relay_params)


def transform_image(im):
    im = np.array(im).astype(np.float32) / 255.0
    return np.transpose(im, [2, 0, 1])[np.newaxis, :]


x = transform_image(image)
ctx = tvm.gpu(0) if target == "cuda" else tvm.cpu(0)
dtype = "float32"
m = graph_runtime.create(graph, lib, ctx)
m.set_input("data", tvm.nd.array(x.astype(dtype)))
m.set_input(**params)
t1 = time.time()
m.run()
t2 = time.time()
out = m.get_output(0).asnumpy()
ftimer = m.module.time_evaluator("run", ctx, number=2, repeat=3)
prof = np.array(ftimer().results) * 1000
print(f"first run {1000 * (t2 - t1):.1f} ms; mean {prof.mean():.2f} ms (std {prof.std():.2f}) over {len(prof)} repeats")
print("top-1:", int(np.argmax(out[0])))
np.save(out_path, out)
