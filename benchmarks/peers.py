"""The peers fxc is measured against, each behind one small adapter.

A peer's ``build(model, inputs, threads)`` compiles a (private copy of a) PyTorch model for its own runtime
and returns a ``Runner``: ``run()`` executes one inference on inputs bound at build time (already in the
peer's native format, so the timing holds only the inference) and ``to_numpy(out)`` turns its result
into one float array for the error check. A peer that cannot be imported or fails at build/run time is
reported as unavailable with the reason by the harness (benchmarks/run.py); adapters never hide errors.

Threads: every peer is pinned to the same thread count (``threads``); the harness also sets
OMP_NUM_THREADS, TVM_NUM_THREADS and FXC_NUM_THREADS before anything is imported.
"""
from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch


@dataclass
class Runner:
    run: Callable[[], Any]
    to_numpy: Callable[[Any], np.ndarray]
    note: str = ""          # e.g. the precision a runtime actually chose


@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    build: Callable[..., Runner]
    versions: Callable[[], str]       # raises ImportError (or any error) when the peer is not installed
    cached: bool = False              # has a persistent compile cache (warm-cache compile time is measured)
    computes: bool = True             # runs the model (False: a floor of overheads; no GFLOP/s)


def _first(out) -> Any:
    while isinstance(out, (list, tuple)) or type(out).__name__ == "Array":
        out = out[0]
    return out


def _torch_numpy(out) -> np.ndarray:
    return _first(out).detach().float().numpy()


def _private(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model).eval()


# -- PyTorch: eager, inductor, inductor + freezing, fxc ----------------------------------------------
def _torch_runner(fn, inputs) -> Runner:
    def run():
        with torch.inference_mode():
            return fn(*inputs)
    return Runner(run, _torch_numpy)


def build_eager(model, inputs, threads) -> Runner:
    torch.set_num_threads(threads)
    return _torch_runner(_private(model), inputs)


def build_inductor(model, inputs, threads) -> Runner:
    torch.set_num_threads(threads)
    return _torch_runner(torch.compile(_private(model)), inputs)


def build_inductor_freezing(model, inputs, threads) -> Runner:
    # options= patches torch._inductor.config for this compiled model only (freezing=True); a distinct
    # backend object, so dynamo keeps its compiled code apart from the plain inductor peer's.
    torch.set_num_threads(threads)
    return _torch_runner(torch.compile(_private(model), options={"freezing": True}), inputs)


def dynamo_alone(gm, example_inputs):
    """A torch.compile backend that computes nothing: the first call's result, every call (Dynamo's own per-call
    cost: its guards and the loads of every parameter it passes to the compiled graph)."""
    first = []

    def run(*args):
        if not first:
            first.append(gm(*args))
        return first[0]
    return run


def build_dynamo_alone(model, inputs, threads) -> Runner:
    # what every torch.compile backend pays per call before and after its own code (max|err| is 0: the eager
    # result of the first call); the time is the floor under the torch.compile peers.
    torch.set_num_threads(threads)
    return _torch_runner(torch.compile(_private(model), backend=dynamo_alone), inputs)


def build_fxc(model, inputs, threads, target: str | None = None) -> Runner:
    # target: a CPU target string for fxc ("llvm -mcpu=haswell"; benchmarks.run --target), None for the host's
    torch.set_num_threads(threads)
    options = {} if target is None else {"options": {"target": target}}
    return _torch_runner(torch.compile(_private(model), backend="fxc", **options), inputs)


def build_fxc_no_module_guards(model, inputs, threads) -> Runner:
    # fxc with the user's per-compile opt-out of Dynamo's guards on nn.Module parameters and buffers
    # (torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe): what a user who never swaps a parameter for one of
    # another shape can choose; fxc itself still sees new weights (addresses, versions) every call
    torch.set_num_threads(threads)
    options = {"guard_filter_fn": torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe}
    return _torch_runner(torch.compile(_private(model), backend="fxc", options=options), inputs)


def build_fxc_opencl(model, inputs, threads) -> Runner:
    # fxc's opencl target on the first OpenCL device (FXC_OPENCL_DEVICE picks another): PoCL's CPU device here
    torch.set_num_threads(threads)
    return _torch_runner(torch.compile(_private(model), backend="fxc", options={"target": "opencl"}), inputs)


def build_fxc_opengl(model, inputs, threads) -> Runner:
    # fxc's opengl target: GLSL compute shaders on the process's EGL context (Mesa's llvmpipe here)
    torch.set_num_threads(threads)
    return _torch_runner(torch.compile(_private(model), backend="fxc", options={"target": "opengl"}), inputs)


def build_fxc_bf16(model, inputs, threads, target: str | None = None) -> Runner:
    # fxc's bf16 mode: convs/matmuls over weights with bfloat16 operands on AVX-512 BF16, float32 accumulation
    torch.set_num_threads(threads)
    options = {"precision": "bf16"} if target is None else {"precision": "bf16", "target": target}
    return _torch_runner(torch.compile(_private(model), backend="fxc", options=options), inputs)


def build_fxc_aot(model, inputs, threads, precision: str = "fp32", target: str | None = None) -> Runner:
    # fxc's ahead-of-time path: torch.export of the model, weights baked in as constants (as ONNX Runtime and
    # OpenVINO have them), no Dynamo guards or AOT-autograd wrappers around the call
    import fxc
    torch.set_num_threads(threads)
    with torch.no_grad():
        compiled = fxc.from_torch(_private(model), tuple(inputs), target=target or "llvm", precision=precision)
    return _torch_runner(compiled, inputs)


def build_fxc_aot_bf16(model, inputs, threads, target: str | None = None) -> Runner:
    # the ahead-of-time path in fxc's bf16 mode: what OpenVINO's bf16 default compares with call for call
    return build_fxc_aot(model, inputs, threads, precision="bf16", target=target)


def _torch_version() -> str:
    return f"torch {torch.__version__}"


def _fxc_version() -> str:
    import fxc
    return f"fxc {fxc.__version__}"


# -- ONNX Runtime on torch.onnx.export -----------------------------------------------------------------
def export_onnx(model, inputs, path: str) -> None:
    with torch.no_grad():
        torch.onnx.export(_private(model), tuple(inputs), path, dynamo=True, external_data=False,
                          verbose=False)


def build_onnxruntime(model, inputs, threads) -> Runner:
    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        export_onnx(model, inputs, path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)}
    return Runner(lambda: sess.run(None, feeds), lambda out: np.asarray(out[0], dtype=np.float32))


def _ort_version() -> str:
    import onnxruntime
    return f"onnxruntime {onnxruntime.__version__}"


# -- OpenVINO (its own converter and runtime) -------------------------------------------------------
def _build_openvino(model, inputs, threads, precision: str | None) -> Runner:
    import openvino as ov
    with torch.no_grad():
        ov_model = ov.convert_model(_private(model), example_input=tuple(inputs))
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(ov_model, "CPU", config)
    request = compiled.create_infer_request()
    arrays = [t.numpy() for t in inputs]

    def run():
        request.infer(arrays)
        return request.get_output_tensor(0).data
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    chosen = hint.to_string() if hasattr(hint, "to_string") else str(hint)
    return Runner(run, lambda out: np.array(out, dtype=np.float32), note=f"precision {chosen}")


def build_openvino_f32(model, inputs, threads) -> Runner:
    return _build_openvino(model, inputs, threads, "f32")


def build_openvino_default(model, inputs, threads) -> Runner:
    return _build_openvino(model, inputs, threads, None)


def _ov_version() -> str:
    import openvino
    return f"openvino {openvino.__version__}"


# -- Apache TVM: torch.export -> Relax, default build ---------------------------------------------------
def build_tvm(model, inputs, threads) -> Runner:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    os.environ["TVM_NUM_THREADS"] = str(threads)
    with torch.no_grad():
        ep = torch.export.export(_private(model), tuple(inputs))
    mod = from_exported_program(ep, keep_params_as_input=False)
    ex = tvm.compile(mod, target="llvm")   # the default Relax pipeline (no tuning, no dlight schedules)
    dev = tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    args = [tvm.runtime.tensor(t.numpy(), dev) for t in inputs]
    main = vm["main"]
    return Runner(lambda: main(*args), lambda out: _first(out).numpy().astype(np.float32))


def _tvm_version() -> str:
    import tvm
    return f"apache-tvm {tvm.__version__}"


# -- MXNet: the Gluon model-zoo twin with the PyTorch model's weights copied in -----------------------
MXNET_ZOO = {"resnet18": "resnet18_v1", "mobilenet_v2": "mobilenetv2_1.0"}
def import_mxnet():
    """Import MXNet 1.9.1 on numpy 1.2x through the shim in fxc/compat/ (it restores the aliases numpy removed)."""
    from fxc.compat.numpy_aliases import import_mxnet as _import
    return _import()


def _torch_param_list(model) -> list[np.ndarray]:
    """Weights in the order Gluon declares them: conv weight(, bias); BN gamma, beta, mean, var; dense w, b."""
    out = []
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            out.append(m.weight.detach().numpy())
            if m.bias is not None:
                out.append(m.bias.detach().numpy())
        elif isinstance(m, torch.nn.BatchNorm2d):
            out += [t.detach().numpy() for t in (m.weight, m.bias, m.running_mean, m.running_var)]
    return out


def _copy_weights(net, model, mx) -> None:
    """Copy the PyTorch weights into the Gluon twin, in declaration order.

    Differences that are bridged exactly: Gluon's MobileNetV2 has a 1x1 expansion conv + BN in its first
    bottleneck (t=1, which PyTorch omits) -> identity conv, identity BN (its input is ReLU6 output, so the
    ReLU6 after it changes nothing); Gluon's classifier is a bias-free 1x1 conv where PyTorch has a Linear
    (whose bias must then be zero). Anything else raises, so the error column never compares different nets.
    """
    src = _torch_param_list(model)
    params = list(net.collect_params().values())
    new = {}                                    # parameter -> value; set below, all at once

    class _Set:
        def __init__(self, p):
            self.p = p

        def set_data(self, value):
            new[self.p.name] = (self.p, np.ascontiguousarray(value, dtype=np.float32))
    params = [_Set(p) for p in params]
    k, i = 0, 0
    while i < len(params):
        p = params[i]
        want = tuple(p.p.shape)
        have = src[k] if k < len(src) else None
        if have is not None and tuple(have.shape) == want:
            p.set_data(have)
            k, i = k + 1, i + 1
        elif have is not None and len(want) == 4 and have.shape == want[:2]:      # Linear -> 1x1 conv
            p.set_data(have.reshape(want))
            k, i = k + 1, i + 1
            if k < len(src) and src[k].ndim == 1 and src[k].shape[0] == want[0]:
                if np.any(src[k] != 0):
                    raise ValueError("the Gluon twin's classifier has no bias but the PyTorch Linear's is non-zero")
                k += 1
        elif len(want) == 4 and want[0] == want[1] and want[2:] == (1, 1):         # identity expansion
            p.set_data(np.eye(want[0], dtype=np.float32).reshape(want))
            c = want[0]
            gamma, beta, mean, var = params[i + 1:i + 5]
            eps = 1e-5
            gamma.set_data(np.ones(c, np.float32))
            beta.set_data(np.zeros(c, np.float32))
            mean.set_data(np.zeros(c, np.float32))
            var.set_data(np.full(c, 1.0 - eps, np.float32))
            i += 5
        else:
            raise ValueError(f"cannot map PyTorch weight #{k} {None if have is None else have.shape} onto "
                             f"Gluon parameter {p.p.name} {want}")
    if k != len(src):
        raise ValueError(f"{len(src) - k} PyTorch weights left over after filling the Gluon twin")
    for p, value in new.values():
        # re-initialise rather than set_data: after the shape-inferring forward the arrays are in MKLDNN layout
        p.initialize(init=mx.init.Constant(mx.nd.array(value)), force_reinit=True)


def build_mxnet(model_name: str):
    def build(model, inputs, threads) -> Runner:
        if model_name not in MXNET_ZOO:
            raise LookupError(f"no Gluon model-zoo twin of {model_name}")
        mx = import_mxnet()
        from mxnet.gluon.model_zoo import vision
        net = vision.get_model(MXNET_ZOO[model_name], pretrained=False)
        net.initialize()
        x = mx.nd.array(inputs[0].numpy())
        net(x).wait_to_read()                     # materialise deferred-shape parameters
        _copy_weights(net, model, mx)
        net.hybridize(static_alloc=True, static_shape=True)

        def run():
            out = net(x)
            out.wait_to_read()
            return out
        return Runner(run, lambda out: out.asnumpy().astype(np.float32))
    return build


def _mxnet_version() -> str:
    return f"mxnet {import_mxnet().__version__}"


# -- the table -----------------------------------------------------------------------------------------
def peers_for(model_name: str) -> dict[str, Peer]:
    """All peers, in report order; fxc last (the reference of the ratio column)."""
    ps = [
        Peer("eager", "PyTorch eager", build_eager, _torch_version),
        Peer("inductor", "torch.compile (inductor)", build_inductor, _torch_version, cached=True),
        Peer("inductor_freezing", "inductor, freezing", build_inductor_freezing, _torch_version, cached=True),
        Peer("dynamo_alone", "Dynamo alone, no compute", build_dynamo_alone, _torch_version, computes=False),
        Peer("onnxruntime", "ONNX Runtime", build_onnxruntime, _ort_version),
        Peer("openvino_f32", "OpenVINO f32", build_openvino_f32, _ov_version),
        Peer("openvino_default", "OpenVINO default", build_openvino_default, _ov_version),
        Peer("tvm", "TVM Relax default", build_tvm, _tvm_version),
        Peer("mxnet", "MXNet Gluon", build_mxnet(model_name), _mxnet_version),
        Peer("fxc_bf16", "fxc bf16", build_fxc_bf16, _fxc_version, cached=True),
        Peer("fxc_opencl", "fxc opencl", build_fxc_opencl, _fxc_version, cached=True),
        Peer("fxc_opengl", "fxc opengl", build_fxc_opengl, _fxc_version, cached=True),
        Peer("fxc_no_module_guards", "fxc, no module guards", build_fxc_no_module_guards, _fxc_version,
             cached=True),
        Peer("fxc_aot", "fxc.from_torch (frozen)", build_fxc_aot, _fxc_version, cached=True),
        Peer("fxc_aot_bf16", "fxc.from_torch bf16", build_fxc_aot_bf16, _fxc_version, cached=True),
        Peer("fxc", "fxc", build_fxc, _fxc_version, cached=True),
    ]
    return {p.name: p for p in ps}


PEER_NAMES = tuple(peers_for("resnet18"))
CPU_TARGETED = ("fxc", "fxc_aot", "fxc_bf16", "fxc_aot_bf16")     # the peers benchmarks.run --target applies to
