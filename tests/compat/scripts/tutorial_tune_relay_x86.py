"""TVM's Relay-era tutorial "Auto-tuning a Convolutional Network for x86 CPU" (tutorials/autotvm/tune_relay_x86.py),
reduced to the calls it makes: relay.testing's ResNet-18 (a 32x32 image, to stay quick), its conv2d tasks, a few
trials of two tuners on the first tasks, then the network built without and with the tuning log and timed.
The graph tuner (DPTuner / apply_graph_best) is left out: the facade does not provide it (its error is tested).

argv: tuning log path, output .npz (the input, and the outputs of the default and the tuned build).
"""
import os
import sys

import numpy as np
import tvm
import tvm.contrib.graph_executor as runtime
from tvm import autotvm, relay
from tvm.autotvm.tuner import RandomTuner, XGBTuner
from tvm.relay import testing  # noqa: F401  (the tutorial imports it)

log_file, out_path = sys.argv[1], sys.argv[2]
target = "llvm"
batch_size, dtype, input_name = 1, "float32", "data"
os.environ["TVM_NUM_THREADS"] = "1"


def get_network(batch_size):
    input_shape = (batch_size, 3, 32, 32)
    mod, params = relay.testing.resnet.get_workload(num_layers=18, batch_size=batch_size, dtype=dtype,
                                                    image_shape=input_shape[1:], num_classes=10)
    return mod, params, input_shape


tuning_option = {
    "log_filename": log_file,
    "early_stopping": None,
    "measure_option": autotvm.measure_option(
        builder=autotvm.LocalBuilder(),
        runner=autotvm.LocalRunner(number=1, repeat=2, min_repeat_ms=0, timeout=60, enable_cpu_cache_flush=True),
    ),
}


def tune_kernels(tasks, measure_option, early_stopping=None, log_filename="tuning.log"):
    for i, task in enumerate(tasks):
        prefix = "[Task %2d/%2d] " % (i + 1, len(tasks))
        tuner_obj = XGBTuner(task, loss_type="rank") if i == 0 else RandomTuner(task)
        n_trial = min(3, len(task.config_space))
        tuner_obj.tune(n_trial=n_trial, early_stopping=early_stopping, measure_option=measure_option,
                       callbacks=[autotvm.callback.progress_bar(n_trial, prefix=prefix),
                                  autotvm.callback.log_to_file(log_filename)])


def run(lib, data):
    dev = tvm.cpu()
    module = runtime.GraphModule(lib["default"](dev))
    module.set_input(input_name, tvm.nd.array(data))
    print(module.benchmark(dev, number=2, repeat=2))
    module.run()
    return module.get_output(0).numpy()


mod, params, data_shape = get_network(batch_size)
tasks = autotvm.task.extract_from_program(mod["main"], target=target, params=params,
                                          ops=(relay.op.get("nn.conv2d"),))
print(f"Extracted {len(tasks)} tasks; tuning the first 2")
tune_kernels(tasks[:2], **tuning_option)

data = np.random.default_rng(0).uniform(size=data_shape).astype(dtype)
with tvm.transform.PassContext(opt_level=3):
    default_out = run(relay.build(mod, target=target, params=params), data)
with autotvm.apply_history_best(log_file):
    with tvm.transform.PassContext(opt_level=3):
        tuned_out = run(relay.build(mod, target=target, params=params), data)
np.savez(out_path, data=data, default=default_out, tuned=tuned_out,
         tasks=np.array([t.workload for t in tasks[:2]]))
