"""The `fxc` command line's newer parts: compile's --dynamic/--dim/--precision and its output checks before any
work, ONNX named dims, --version, a closed pipe, the cache's units, a device artifact's inspect, and the commands
devices, ops and explain (fxc/commands/)."""
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fxc.cli import _bytes, main
from fxc.commands.ops import frontend_rows, op_compiles

from ..helpers import FXC, fxc_cli

FACTORY = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))).softmax(-1)


class Branchy(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x) * 2
        if y.sum() > 0:         # a graph break
            y = y + 1
        return torch.nonzero(y > 1.5).shape[0] + y


def make():
    torch.manual_seed(0)
    return Net().eval()


def branchy():
    return Branchy()
'''




@pytest.fixture(scope="module")
def factory(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmds")
    (d / "net.py").write_text(FACTORY)
    return d


def _named_dim_onnx(path: Path) -> Path:
    """An MLP over x: float32[batch, 8] (a named dim)."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
                              [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_compile_output_checked_before_compiling(factory, tmp_path):
    t0 = time.perf_counter()
    p = fxc_cli("compile", f"{factory / 'net.py'}:make", "--input-shape", "2,8", "-o", tmp_path / "missing/sub/m.fxc",
                ok=False)
    assert "the folder" in p.stderr and "does not exist" in p.stderr and not (tmp_path / "missing").exists()
    (tmp_path / "existing").mkdir()
    p = fxc_cli("compile", f"{factory / 'net.py'}:make", "--input-shape", "2,8", "-o", tmp_path / "existing",
                ok=False)
    assert "is a folder" in p.stderr and "model.fxc" in p.stderr and ".tmp" not in p.stderr
    assert time.perf_counter() - t0 < 60        # (no model was traced: each failed at once, importing no torch)


def test_compile_dynamic_and_dim(factory, tmp_path):
    out = tmp_path / "dyn.fxc"
    p = fxc_cli("compile", f"{factory / 'net.py'}:make", "--input-shape", "3,8", "--dynamic", "-o", out)
    assert "symbol" in p.stdout, p.stdout
    x5 = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    np.save(tmp_path / "x5.npy", x5)
    y = fxc_cli("run", out, "--input", tmp_path / "x5.npy", "-o", tmp_path / "y5.npy")
    assert "[5, 4]" in y.stdout
    assert np.allclose(np.load(tmp_path / "y5.npy").sum(1), 1, atol=1e-5)       # softmax rows of the batch of 5
    p = fxc_cli("compile", f"{factory / 'net.py'}:make", "--input-shape", "2,8", "--dim", "rows:0:1:32", "-o",
                tmp_path / "dim.fxc")
    assert "in [1, 32]" in p.stdout, p.stdout
    p = subprocess.run([str(FXC), "compile", f"{factory / 'net.py'}:make", "--input-shape", "2,8", "--dim", "rows:x",
                        "-o", str(tmp_path / "bad.fxc")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "bad --dim 'rows:x'" in p.stderr and "NAME:AXIS" in p.stderr     # a usage error


def test_compile_precision(factory, tmp_path):
    p = fxc_cli("compile", f"{factory / 'net.py'}:make", "--input-shape", "2,8", "--precision", "fp16", "-o",
                tmp_path / "p.fxc", ok=False)
    assert "fp16" in p.stderr and "'fp32'" in p.stderr
    fxc_cli("compile", f"{factory / 'net.py'}:make", "--input-shape", "2,8", "--precision", "fp32", "-o",
            tmp_path / "p.fxc")


def test_onnx_named_dims(tmp_path):
    model = _named_dim_onnx(tmp_path / "mlp.onnx")
    p = fxc_cli("compile", model, "-o", tmp_path / "m.fxc", ok=False)
    assert "--input-shape" in p.stderr and "--dynamic" in p.stderr and "batch" in p.stderr
    assert "from_onnx" not in p.stderr
    fxc_cli("compile", model, "--input-shape", "2,8", "-o", tmp_path / "static.fxc")
    p = fxc_cli("compile", model, "--dynamic", "-o", tmp_path / "dyn.fxc")
    assert "symbol" in p.stdout, p.stdout
    x = np.random.default_rng(2).standard_normal((7, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    fxc_cli("run", tmp_path / "dyn.fxc", "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    w = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.maximum(x @ w["w1"], 0) @ w["w2"], rtol=1e-4,
                               atol=1e-4)


def test_version_pipe_and_cache_units(tmp_path, capsys):
    from fxc.version import __version__
    assert fxc_cli("--version").stdout.strip() == f"fxc {__version__}"
    p = subprocess.Popen([str(FXC), "ops", "--frontend", "torch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()            # as `| head -1` does once it has its line (here before any: the table fits a pipe)
    assert p.wait(timeout=300) == 141 and p.stderr.read() == b""
    assert [_bytes(n) for n in (512, 1 << 20, 3 << 29, 2 << 30)] == ["512 B", "1.0 MiB", "1.50 GiB", "2.00 GiB"]
    env = {"FXC_CACHE_DIR": str(tmp_path / "c"), "FXC_CACHE_MAX_BYTES": str(1 << 20)}
    assert "bound 1.0 MiB" in fxc_cli("cache", env=env).stdout


def test_inspect_device_artifact(tmp_path):
    import torch

    import fxc
    m = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    path = fxc.export(fxc.from_torch(m, (torch.randn(2, 4),), target="opencl"), tmp_path / "cl.fxc")
    out = fxc_cli("inspect", path).stdout
    assert "target: opencl (a device artifact; built on device " in out and "cpu=?" not in out and "flags=-" not in out


def test_devices_lists_what_runs_here():
    out = fxc_cli("devices").stdout
    lines = out.splitlines()
    assert lines[0].startswith("llvm") and "runs here" in lines[0]
    assert any(ln.startswith("opencl -device=0") and "runs here" for ln in lines)      # PoCL
    assert any(ln.startswith("opengl") and "runs here" in ln for ln in lines)          # Mesa's EGL
    assert "compute units" in out and "32-bit indices" in out       # the GL family's caps
    assert any(ln.startswith("clml") for ln in lines)


def test_ops_tables_and_target_check(capsys):
    onnx_rows = {name: used for name, _, used in frontend_rows("onnx")}
    assert "conv2d" in onnx_rows["Conv"] and onnx_rows["Relu"] == ["relu"] and onnx_rows["Abs"] == ["abs"]
    mx = {name: used for name, _, used in frontend_rows("mxnet")}
    assert "conv2d" in mx["Convolution"]
    torch_rows = {name: used for name, _, used in frontend_rows("torch")}
    assert "conv2d" in torch_rows["aten.convolution.default"]
    assert op_compiles("relu", "opengl") is None
    assert "LoweringError" in op_compiles("lgamma", "opengl")       # GLSL has no lgamma (tests/backends REFUSED)
    assert main(["ops", "--frontend", "mxnet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{len(mx)} mxnet ops fxc converts") and "Convolution" in out


def test_explain_command(factory, tmp_path):
    pic = tmp_path / "g.html"
    p = fxc_cli("explain", f"{factory / 'net.py'}:branchy", "--input-shape", "4,5", "--picture", pic)
    assert "captured graph(s)" in p.stdout and "kernels (" in p.stdout and f"picture: {pic}" in p.stdout
    assert 'class="cluster group' in pic.read_text()
    p = fxc_cli("explain", f"{factory / 'net.py'}:make", ok=False)
    assert "--input-shape" in p.stderr
