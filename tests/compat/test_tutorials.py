"""The seed article's deployment script and TVM's Relay-era tutorials (tests/compat/scripts/: reductions of what they
call, on offline models with random weights) run on fxc with only `import fxc.compat.tvm.install` added on top, or
unchanged through `python -m fxc.compat.tvm`; their outputs match the frameworks' own."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fxc
from fxc.compat.numpy_aliases import import_mxnet
from tests.compat.models import gluon_resnet, onnx_reference, super_resolution, symbol_params

SCRIPTS = Path(__file__).parent / "scripts"
REPO = Path(__file__).resolve().parents[2]
ADDED_LINE = "import fxc.compat.tvm.install\n"


def run_script(name: str, *args, tmp_path: Path, unchanged: bool = False) -> str:
    """Run scripts/<name>.py in a fresh process: with the one added line, or unchanged through the runner."""
    source = (SCRIPTS / f"{name}.py").read_text()
    script = tmp_path / f"{name}.py"
    script.write_text(source if unchanged else ADDED_LINE + source)
    command = [sys.executable] + (["-m", "fxc.compat.tvm"] if unchanged else []) + [str(script), *map(str, args)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO)] + os.environ.get("PYTHONPATH", "").split(
        os.pathsep))}
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A Gluon ResNet-18 saved as an MXNet checkpoint, a 32x32 picture, and MXNet's output for it."""
    mx = import_mxnet()
    folder = tmp_path_factory.mktemp("seed")
    net, _, _ = gluon_resnet(32)
    sym, arg, aux = symbol_params(net)
    mx.model.save_checkpoint(str(folder / "resnet18_v1"), 7, sym, arg, aux)
    pixels = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "test.png")
    x = np.transpose(pixels.astype(np.float32) / 255.0, [2, 0, 1])[np.newaxis]
    return folder, net(mx.nd.array(x)).asnumpy()


@pytest.mark.parametrize("target, unchanged", [("cuda", False), ("llvm", True)], ids=["cuda-added-line",
                                                                                       "llvm-unchanged"])
def test_seed_script(checkpoint, target, unchanged, tmp_path):
    """The seed: checkpoint -> from_mxnet -> build_config + relay.build's tuple -> graph_runtime.create -> timing.
    Target "cuda" is fxc's OpenCL (PoCL here)."""
    folder, mxnet_out = checkpoint
    out = tmp_path / "out.npy"
    printed = run_script("seed_mxnet_checkpoint", folder / "resnet18_v1", 7, folder / "test.png", target, out,
                         tmp_path=tmp_path, unchanged=unchanged)
    np.testing.assert_allclose(np.load(out), mxnet_out, rtol=1e-4, atol=1e-4)
    assert f"top-1: {int(np.argmax(mxnet_out[0]))}" in printed and "over 3 repeats" in printed


def test_tutorial_from_mxnet(tmp_path):
    run_script("tutorial_from_mxnet", tmp_path / "out", tmp_path=tmp_path)
    got = np.load(tmp_path / "out.npz")
    mxnet_out = got["mxnet"]
    e = np.exp(mxnet_out - mxnet_out.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got["probabilities"], e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["logits"], mxnet_out, rtol=1e-4, atol=1e-4)


def test_tutorial_from_onnx(tmp_path):
    import onnx
    model = super_resolution(size=32)
    onnx.save(model, tmp_path / "super_resolution.onnx")
    pixels = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "cat.png")
    run_script("tutorial_from_onnx", tmp_path / "super_resolution.onnx", tmp_path / "cat.png", tmp_path / "y.npy",
               tmp_path=tmp_path)
    x = np.array(Image.open(tmp_path / "cat.png").convert("YCbCr").split()[0])[np.newaxis, np.newaxis]
    x = x.astype(np.float32)
    got = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(got, onnx_reference(model, x), rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(got, fxc.from_onnx(model)(x), rtol=1e-5, atol=1e-3)


def test_tutorial_from_pytorch(tmp_path):
    run_script("tutorial_from_pytorch", tmp_path / "out.npz", tmp_path=tmp_path)
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got["tvm"], got["torch"], rtol=1e-4, atol=1e-5)


def test_tutorial_relay_quick_start(tmp_path):
    """relay.testing's ResNet-18 built, run, exported and loaded back; checked against the same network in torch."""
    import torch

    from fxc.compat.tvm import workloads
    run_script("tutorial_relay_quick_start", "llvm", tmp_path / "out.npz", tmp_path=tmp_path)
    got = np.load(tmp_path / "out.npz")
    mod, _ = workloads.resnet.get_workload(num_layers=18, batch_size=1, image_shape=(3, 32, 32), num_classes=10)
    with torch.no_grad():
        eager = mod["main"].body.source.module_(torch.from_numpy(got["data"])).numpy()
    np.testing.assert_allclose(got["out"], eager, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got["out_deploy"], got["out"])
