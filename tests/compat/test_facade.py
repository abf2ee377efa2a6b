"""fxc's TVM facade (fxc/compat/tvm), API by API: each Relay-era call against fxc's own result for the same model
and the framework's eager output; the calls it does not provide raise its one named error."""
import warnings

import numpy as np
import pytest

import fxc
from fxc.compat.numpy_aliases import import_mxnet
from fxc.compat.tvm import disable, enable
from fxc.compat.tvm.ndarray import FacadeNote
from fxc.compat.tvm.unsupported import UnsupportedAPIError, UnsupportedModuleError
from fxc.errors import InputError, ShapeError, TargetError
from tests.compat.models import gluon_resnet, onnx_reference, super_resolution, symbol_params, torch_cnn

# a TVM target string and the facade device each fxc target runs on (tests/targets.py's names)
TVM_TARGETS = {"llvm": ("llvm", "cpu"), "llvm -mcpu=haswell": ("llvm -mcpu=haswell -keys=cpu", "cpu"),
               "opencl": ("opencl", "cl"), "opengl": ("opengl", "opengl"), "webgl": ("webgl", "opengl"),
               "webgpu": ("webgpu", "webgpu"), "wasm": ("wasm", "cpu")}


@pytest.fixture(scope="module")
def tvm():
    enable()
    import tvm as facade
    from tvm import relay  # noqa: F401  (tvm.relay, as scripts import it)
    yield facade
    disable()


@pytest.fixture(scope="module")
def resnet():
    net, x, ref = gluon_resnet(32)
    return net, x, ref, symbol_params(net)


@pytest.fixture(scope="module")
def mxnet_build(tvm, resnet):
    """relay.build of the Gluon ResNet's symbol (the seed's tuple form) and its frontend's params."""
    _, _, _, (sym, arg, aux) = resnet
    mod, params = tvm.relay.frontend.from_mxnet(sym, {"data": (1, 3, 32, 32)}, arg_params=arg, aux_params=aux)
    with tvm.relay.build_config(opt_level=3):
        graph, lib, built_params = tvm.relay.build(mod, "llvm", params=params)
    return mod, params, graph, lib, built_params


# ------------------------------------------------------------------------------------------------ the import hook
def test_import_reaches_the_facade_for_this_process_only(tvm):
    import tvm.contrib.graph_runtime as runtime
    from tvm.contrib import graph_executor
    from tvm.relay.testing import resnet
    assert tvm.__name__ == "fxc.compat.tvm.top" and runtime is graph_executor and callable(resnet.get_workload)
    with pytest.raises(UnsupportedModuleError, match="tvm.micro"):
        import tvm.micro  # noqa: F401
    disable()
    try:
        with pytest.raises(ModuleNotFoundError):
            import tvm  # noqa: F401, F811
    finally:
        enable()
    import tvm  # noqa: F811
    assert tvm.cpu(0).exist


def _fake_real_tvm(root):
    """A package called tvm standing for an installed apache-tvm: `import tvm` must find it, not the facade."""
    (root / "tvm").mkdir()
    (root / "tvm" / "__init__.py").write_text("REAL = True\n")
    (root / "tvm" / "relay.py").write_text("REAL = True\n")


def test_a_real_tvm_wins_unless_asked(tmp_path):
    import subprocess
    import sys
    _fake_real_tvm(tmp_path)
    script = tmp_path / "uses_tvm.py"
    script.write_text("import tvm\nfrom tvm import relay\n"
                      "print('real' if 'REAL' in vars(tvm) and 'REAL' in vars(relay) else 'facade')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{_repo()}", "PATH": "/usr/bin:/bin"}

    def run(*args):
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()
    assert run("-c", "import fxc.compat.tvm.install\n" + script.read_text()) == "real"
    assert run("-m", "fxc.compat.tvm", str(script)) == "real"
    assert run("-m", "fxc.compat.tvm", "--replace-real-tvm", str(script)) == "facade"
    assert run("-c", "import fxc.compat.tvm as f\nf.enable(replace_real=True)\n" + script.read_text()) == "facade"
    refused = subprocess.run([sys.executable, "-c", "import tvm\nimport fxc.compat.tvm as f\n"
                              "f.enable(replace_real=True)"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert refused.returncode != 0 and "imported apache-tvm already" in refused.stderr


def _repo() -> str:
    from pathlib import Path
    return str(Path(__file__).resolve().parents[2])


# --------------------------------------------------------------------------------------- targets, devices, nd
def test_targets_map_to_fxc_targets(tvm):
    Target = tvm.target.Target
    assert str(Target("llvm -mcpu=haswell -keys=cpu")) == "llvm -mcpu=haswell"
    assert str(Target("llvm", host="llvm")) == "llvm" and Target("llvm").kind.name == "llvm"
    with pytest.warns(FacadeNote, match="no CUDA backend"):
        assert str(tvm.target.cuda()) == "opencl" and str(Target("cuda -arch=sm_80")) == "opencl"
    assert str(Target("opencl -device=mali")) == "opencl" and str(tvm.target.mali()) == "opencl"
    for spec in ("opengl", "webgl", "webgpu", "wasm"):
        assert str(Target(spec)) == spec
    assert str(tvm.target.arm_cpu("rasp3b")) == "rasp3b" == str(tvm.target.rasp())
    with pytest.raises(UnsupportedAPIError, match=r"arm_cpu\('pixel2'\).*rasp3b"):
        tvm.target.arm_cpu("pixel2")
    with pytest.raises(UnsupportedAPIError, match="'vulkan'.*opencl"):
        Target("vulkan")
    with pytest.raises(UnsupportedAPIError, match="-libs=cudnn"):
        Target("cuda -libs=cudnn")
    with pytest.raises(UnsupportedAPIError, match="target host 'c'"):
        Target("llvm", host="c")


def test_an_arm_board_is_fxc_s_alias(tvm):
    """arm_cpu("rasp3b") builds what fxc's target "rasp3b" builds: the same module, or the same TargetError."""
    from fxc.target import Target as FxcTarget
    mod, params = tvm.relay.frontend.from_onnx(super_resolution(size=8), {"input": (1, 1, 8, 8)})
    try:
        FxcTarget.parse("rasp3b")
    except TargetError as e:
        with pytest.raises(TargetError, match=str(e)[:30]):
            tvm.relay.build(mod, tvm.target.arm_cpu("rasp3b"), params=params)
    else:
        lib = tvm.relay.build(mod, tvm.target.arm_cpu("rasp3b"), params=params)
        assert lib.module.target_spec == str(fxc.from_onnx(super_resolution(size=8), target="rasp3b").module
                                             .target_spec)


def test_devices_and_ndarrays(tvm):
    assert tvm.gpu(0) == tvm.cuda(0) and tvm.cuda(0).device_type == 2 and tvm.cl(0).device_type == 4
    assert tvm.opengl(0).device_type == 11 and tvm.device("cpu", 0) == tvm.cpu(0) == tvm.context("llvm")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    nd = tvm.nd.array(a, tvm.cpu(0))
    a[0, 0] = 99                                            # nd.array copies
    assert nd.shape == (2, 3) and nd.dtype == "float32" and nd.asnumpy()[0, 0] == 0
    np.testing.assert_array_equal(nd.numpy(), nd.asnumpy())
    empty = tvm.nd.empty((2, 3))
    np.testing.assert_array_equal(empty.copyfrom(nd).numpy(), nd.numpy())
    with pytest.raises(InputError, match="same shape"):
        empty.copyfrom(np.zeros((3, 2)))
    with pytest.raises(UnsupportedAPIError, match="NDArray.to_dlpack"):
        nd.to_dlpack()
    saved = tvm.runtime.save_param_dict({"w": nd})
    np.testing.assert_array_equal(tvm.runtime.load_param_dict(saved)["w"].numpy(), nd.numpy())


def test_pass_context_means_fxc_options(tvm):
    PassContext = tvm.transform.PassContext
    assert PassContext(opt_level=3).fxc_options() == {}
    assert PassContext(opt_level=2).fxc_options() == {"blocked_layout": False, "winograd": "off"}
    assert PassContext(opt_level=0).fxc_options()["fuse"] is False
    assert PassContext(opt_level=3, disabled_pass=["FuseOps"]).fxc_options() == {"fuse": False}
    with pytest.warns(FacadeNote, match="FoldScaleAxis"):
        assert PassContext(opt_level=3, disabled_pass=["FoldScaleAxis"]).fxc_options() == {}
    with pytest.raises(UnsupportedAPIError, match="NoSuchPass"):
        PassContext(disabled_pass=["NoSuchPass"])
    with pytest.raises(UnsupportedAPIError, match="config"):
        PassContext(config={"relay.backend.use_auto_scheduler": True})
    assert PassContext.current().opt_level == 2
    with tvm.relay.build_config(opt_level=3) as ctx:
        assert PassContext.current() is ctx


# ------------------------------------------------------------------------------------------------ MXNet
def test_from_mxnet_symbol_builds_fxc_s_module(tvm, resnet, mxnet_build):
    """The seed's path: from_mxnet(sym, shape, arg_params, aux_params) -> relay.build's tuple -> graph_runtime."""
    net, x, ref, (sym, arg, aux) = resnet
    mod, params, graph, lib, built_params = mxnet_build
    assert set(params) == set(arg) | set(aux) and built_params == {}
    m = tvm.contrib.graph_runtime.create(graph, lib, tvm.cpu(0))
    m.set_input("data", tvm.nd.array(x))
    m.set_input(**params)                   # the params compiled in, given again: accepted (the same values)
    m.run()
    out = m.get_output(0).asnumpy()
    own = fxc.from_mxnet(sym, (arg, aux), shapes={"data": x.shape})(x)
    np.testing.assert_array_equal(out, own)                             # fxc's own build of the same model
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)           # MXNet's eager output
    assert m.get_num_outputs() == 1 and m.get_num_inputs() == 1
    np.testing.assert_array_equal(m.get_input(0).numpy(), x)
    m.set_input(0, tvm.nd.array(np.zeros_like(x)))                       # by index
    m.run()
    zero = fxc.from_mxnet(sym, (arg, aux), shapes={"data": x.shape})(np.zeros_like(x))
    np.testing.assert_array_equal(m.get_output(0).numpy(), zero)
    name = next(iter(arg))
    with pytest.raises(InputError, match=f"param '{name}' differs"):
        m.set_input(**{name: params[name].numpy() + 1})
    with pytest.raises(InputError, match="no input 'label'"):
        m.set_input("label", x)
    with pytest.raises(ShapeError, match="built for"):
        m.set_input("data", np.zeros((2, 3, 32, 32), np.float32))


def test_relay_build_params_rebind_weights(tvm, resnet, mxnet_build):
    net, x, ref, (sym, arg, aux) = resnet
    mod, params = mxnet_build[:2]
    name = next(k for k in arg if k.endswith("weight"))
    changed = {**params, name: tvm.nd.array(params[name].numpy() * 0.5)}
    with tvm.transform.PassContext(opt_level=3):            # fxc's defaults, as fxc.from_mxnet's build
        lib = tvm.relay.build(mod, "llvm", params=changed)
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(data=x)
    arg2 = {**{k: v.asnumpy() for k, v in arg.items()}, name: arg[name].asnumpy() * 0.5}
    np.testing.assert_array_equal(m.get_output(0).numpy(), fxc.from_mxnet(sym, (arg2, aux), shapes={
        "data": x.shape})(x))
    with pytest.raises(InputError, match="not a param"):
        tvm.relay.build(mod, "llvm", params={"nope": params[name]})
    with pytest.raises(ShapeError, match=name):
        tvm.relay.build(mod, "llvm", params={name: np.zeros((1,), np.float32)})


def test_from_mxnet_gluon_block_with_a_softmax(tvm, resnet):
    net, x, ref, _ = resnet
    mod, params = tvm.relay.frontend.from_mxnet(net, {"data": x.shape})
    func = mod["main"]
    func = tvm.relay.Function(func.params, tvm.relay.nn.softmax(func.body), None, func.type_params, func.attrs)
    with tvm.transform.PassContext(opt_level=2, disabled_pass=["AlterOpLayout"]):
        lib = tvm.relay.build(tvm.IRModule.from_expr(func), "llvm", params=params)
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input("data", x)
    m.run()
    e = np.exp(ref - ref.max(axis=1, keepdims=True))
    np.testing.assert_allclose(m.get_output(0).numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
    assert "softmax" in func.astext()


# ------------------------------------------------------------------------------------------------ ONNX, PyTorch
def test_from_onnx_with_create_executor(tvm):
    model = super_resolution(size=16)
    x = np.random.default_rng(0).uniform(0, 255, (1, 1, 16, 16)).astype(np.float32)
    mod, params = tvm.relay.frontend.from_onnx(model, {"input": x.shape})
    assert set(params) == {t.name for t in model.graph.initializer}
    with tvm.transform.PassContext(opt_level=1):
        run = tvm.relay.create_executor("graph", mod, tvm.cpu(0), "llvm", params).evaluate()
    out = run(tvm.nd.array(x)).numpy()
    np.testing.assert_array_equal(out, fxc.from_onnx(model, target="llvm", blocked_layout=False, winograd="off")(x))
    from tvm.relay.backend import Executor, Runtime  # TVM 0.9's form of relay.build
    with tvm.transform.PassContext(opt_level=1):
        lib = tvm.relay.build(mod, "llvm", params=params, executor=Executor("graph"), runtime=Runtime("cpp"))
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(input=x)
    np.testing.assert_array_equal(m.get_output(0).numpy(), out)
    with pytest.raises(UnsupportedAPIError, match="Executor\\('aot'\\)"):
        Executor("aot")
    np.testing.assert_allclose(out, onnx_reference(model, x), rtol=1e-4, atol=1e-3)
    lazy = tvm.relay.create_executor("graph", mod, tvm.cpu(0), "llvm").evaluate()
    np.testing.assert_array_equal(lazy(x, **params).numpy(), out)          # params at the call, as old scripts pass
    assert tvm.relay.frontend.from_onnx(model, {"input": x.shape}, freeze_params=True)[1] == {}
    params["w0"].copyfrom(params["w0"].numpy() * 2)          # a script changing a param: the build takes it
    with tvm.transform.PassContext(opt_level=1):
        doubled = tvm.relay.create_executor("graph", mod, tvm.cpu(0), "llvm", params).evaluate()(x).numpy()
    from onnx import numpy_helper
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(params["w0"].numpy(), "w0"))
    np.testing.assert_allclose(doubled, onnx_reference(model, x), rtol=1e-4, atol=1e-3)
    assert not np.allclose(doubled, out)
    with pytest.raises(InputError, match="not inputs"):
        tvm.relay.frontend.from_onnx(model, {"1": x.shape})


def test_from_pytorch_traced_module(tvm):
    import torch
    model = torch_cnn()
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    mod, params = tvm.relay.frontend.from_pytorch(torch.jit.trace(model, x), [("input0", (1, 3, 16, 16))])
    assert "0.weight" in params and not any(k.endswith("num_batches_tracked") for k in params)
    lib = tvm.relay.build(mod, target=tvm.target.Target("llvm", host="llvm"), params=params)
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input("input0", tvm.nd.array(x.numpy()))
    m.run()
    out = m.get_output(0).numpy()
    np.testing.assert_allclose(out, fxc.from_torch(model, (x,))(x).numpy(), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(out, model(x).numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------ export, load, timing
def test_export_library_and_load_module(tvm, resnet, mxnet_build, tmp_path):
    net, x, ref, _ = resnet
    graph, lib = mxnet_build[2], mxnet_build[3]
    path = tmp_path / "deploy_lib.so"
    lib.export_library(str(path))
    loaded = tvm.runtime.load_module(str(path))
    m = tvm.contrib.graph_executor.GraphModule(loaded["default"](tvm.cpu(0)))
    m.run(data=tvm.nd.array(x))
    built = tvm.contrib.graph_runtime.create(graph, lib, tvm.cpu(0))
    built.run(data=x)
    np.testing.assert_array_equal(m.get_output(0).numpy(), built.get_output(0).numpy())
    again = tvm.contrib.graph_runtime.create(graph, loaded, tvm.cpu(0))     # the old json + lib + params files
    again.load_params(tvm.relay.save_param_dict(mxnet_build[4]))
    again.run(data=x)
    np.testing.assert_array_equal(again.get_output(0).numpy(), built.get_output(0).numpy())
    assert fxc.load(str(path)).inputs[0].name == "data"                 # fxc's own artifact
    with pytest.raises(UnsupportedAPIError, match="fcompile"):
        lib.export_library(str(path), fcompile=print)


def test_time_evaluator_and_benchmark(tvm, resnet, mxnet_build):
    x = resnet[1]
    m = tvm.contrib.graph_executor.GraphModule(mxnet_build[3]["default"](tvm.cpu(0)))
    m.set_input("data", x)
    result = m.module.time_evaluator("run", tvm.cpu(0), number=2, repeat=3)()
    assert len(result.results) == 3 and 0 < result.min <= result.mean <= result.max and "mean (ms)" in str(result)
    assert len(m.benchmark(tvm.cpu(0), number=1, repeat=2).results) == 2
    with pytest.raises(UnsupportedAPIError, match="get_output"):
        m.module.time_evaluator("get_output", tvm.cpu(0))
    with pytest.raises(UnsupportedAPIError, match="llvm module on opencl"):
        mxnet_build[3]["default"](tvm.cl(0))


def test_relay_testing_workloads(tvm):
    mod, params = tvm.relay.testing.mobilenet.get_workload(batch_size=1, num_classes=10, image_shape=(3, 32, 32))
    data = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    lib = tvm.relay.build(mod, "llvm", params=params)
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(data=data)
    module = mod["main"].body.source.module_                # the torch network behind the workload
    import torch
    with torch.no_grad():
        np.testing.assert_allclose(m.get_output(0).numpy(), module(torch.from_numpy(data)).numpy(),
                                   rtol=1e-4, atol=1e-4)
    again = tvm.relay.testing.mobilenet.get_workload(batch_size=1, num_classes=10, image_shape=(3, 32, 32))[1]
    assert all(np.array_equal(again[k].numpy(), v.numpy()) for k, v in params.items())      # a fixed seed
    with pytest.raises(UnsupportedAPIError, match="ResNet-18 and -34"):
        tvm.relay.testing.resnet.get_workload(num_layers=50)
    with pytest.raises(UnsupportedAPIError, match="relay.testing.squeezenet"):
        tvm.relay.testing.squeezenet.get_workload()


@pytest.mark.all_targets
def test_graph_executor_on_every_target(tvm, target):
    """The ONNX network built from a TVM target string, run on the facade device of that target: fxc's result."""
    spec, device = TVM_TARGETS[target]
    model = super_resolution(size=8)
    x = np.random.default_rng(2).uniform(0, 1, (1, 1, 8, 8)).astype(np.float32)
    mod, params = tvm.relay.frontend.from_onnx(model, {"input": x.shape})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FacadeNote)
        lib = tvm.relay.build(mod, spec, params=params)
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](getattr(tvm, device)(0)))
    m.run(input=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), fxc.from_onnx(model, target=target)(x), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(m.get_output(0).numpy(), onnx_reference(model, x), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------------ unsupported
@pytest.mark.parametrize("call, named", [
    (lambda tvm: tvm.relay.frontend.from_tensorflow, "from_tensorflow.*from_onnx"),
    (lambda tvm: tvm.relay.transform.FoldConstant(), "relay.transform"),
    (lambda tvm: tvm.te.placeholder((1,)), "tvm.te.placeholder"),
    (lambda tvm: tvm.contrib.download.download_testdata("http://x", "y"), "download_testdata"),
    (lambda tvm: tvm.relay.build(None, "llvm"), "relay.build of a NoneType"),
    (lambda tvm: tvm.relay.build(tvm.IRModule(), {"cuda": "cuda", "cpu": "llvm"}), "dict of targets"),
    (lambda tvm: tvm.relay.nn.conv2d, "relay.nn.conv2d"),
    (lambda tvm: tvm.autotvm.graph_tuner.DPTuner(None), "DPTuner"),
    (lambda tvm: tvm.autotvm.apply_graph_best("x.log"), "apply_graph_best"),
    (lambda tvm: tvm.autotvm.RPCRunner("key"), "RPCRunner.*dask"),
    (lambda tvm: tvm.rpc, "tvm.rpc"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_unsupported_calls_name_the_api(tvm, call, named):
    with pytest.raises(UnsupportedAPIError, match=named):
        call(tvm)


def test_the_module_level_errors_keep_hasattr_working(tvm):
    assert not hasattr(tvm, "__wrapped__") and not hasattr(tvm.relay, "__something__")
    import_mxnet()          # (the facade restored numpy's aliases when it was enabled)
