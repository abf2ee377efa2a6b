"""The `fxc` command line (the installed console script): compile, run, inspect, extract — and its errors."""
import importlib.util
import json

import numpy as np
import pytest
import torch

from ..helpers import assert_close_np, fxc_cli

FACTORY = '''
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.conv = torch.nn.Conv1d(1, 2, 3, padding=1)

    def forward(self, x, idx):
        h = self.emb(idx).sum(1) + x
        return torch.relu(self.conv(h[:, None])).flatten(1), idx.sum(1)


def make():
    torch.manual_seed(0)
    return Model()
'''




@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "factory.py").write_text(FACTORY)
    out = d / "model.fxc"
    p = fxc_cli("compile", f"{d / 'factory.py'}:make", "--input-shape", "2,4", "--input-shape", "2,3",
                "--input-dtype", "float32", "--input-dtype", "int64", "-o", out)
    assert "x: float32[2, 4]" in p.stdout and "idx: int64[2, 3]" in p.stdout, p.stdout
    spec = importlib.util.spec_from_file_location("cli_factory", d / "factory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return d, out, module.make().eval()


def test_compile_then_run_matches_eager(compiled):
    d, artifact, model = compiled
    x, idx = np.random.default_rng(0).standard_normal((2, 4), np.float32), np.array([[1, 2, 3], [9, 0, 5]])
    np.save(d / "x.npy", x)
    np.save(d / "idx.npy", idx)
    p = fxc_cli("run", artifact, "--input", d / "x.npy", "--input", d / "idx.npy", "-o", d / "y0.npy",
                "-o", d / "y1.npy")
    assert "output0: float32[2, 8]" in p.stdout and "output1: int64[2]" in p.stdout, p.stdout
    with torch.no_grad():
        expected = model(torch.from_numpy(x), torch.from_numpy(idx))
    assert_close_np(np.load(d / "y0.npy"), expected[0].numpy())
    assert_close_np(np.load(d / "y1.npy"), expected[1].numpy())
    p = fxc_cli("run", artifact, "--input", d / "x.npy", "--input", d / "idx.npy", "--repeat", "3")
    assert "latency:" in p.stdout and "min" in p.stdout


def test_inspect_and_extract(compiled, tmp_path):
    _, artifact, _ = compiled
    p = fxc_cli("inspect", artifact)
    for text in ("all sha256 verified", "target: llvm", "input  x: float32[2, 4]", "input  idx: int64[2, 3]",
                 "libfxc_model.so", "params.bin", "fxc_main", "plan ("):
        assert text in p.stdout, (text, p.stdout)
    plan = p.stdout.split("plan (")[1]
    assert "output0" in plan and "output1" in plan and "idx" in plan and "const" in plan, plan
    m = json.loads(fxc_cli("inspect", artifact, "--json").stdout)
    assert m["format_version"] == 1 and [s["dtype"] for s in m["inputs"]] == ["float32", "int64"]
    fxc_cli("extract", artifact, tmp_path / "dir")
    assert {p.name for p in (tmp_path / "dir").iterdir()} == {"manifest.json", "libfxc_model.so", "params.bin",
                                                               "fxc_model.h", "fxc_model.c"}


def test_cli_errors_are_messages(compiled, tmp_path):
    d, artifact, _ = compiled
    np.save(tmp_path / "bad.npy", np.zeros((3, 4), np.float32))
    np.save(tmp_path / "idx.npy", np.zeros((3, 4), np.int64))
    p = fxc_cli("run", artifact, "--input", tmp_path / "bad.npy", "--input", tmp_path / "bad.npy", ok=False)
    assert "InputError" in p.stderr and "expected dtype int64, the file holds float32" in p.stderr
    p = fxc_cli("run", artifact, "--input", tmp_path / "bad.npy", "--input", tmp_path / "idx.npy", ok=False)
    assert "InputError" in p.stderr and "expected shape [2, 4], the file holds [3, 4]" in p.stderr
    (tmp_path / "cut.fxc").write_bytes(artifact.read_bytes()[:1000])
    p = fxc_cli("inspect", tmp_path / "cut.fxc", ok=False)
    assert "ArtifactError" in p.stderr and "export the model again" in p.stderr
    p = fxc_cli("run", artifact, "--input", tmp_path / "missing.npy", ok=False)
    assert "cannot read input" in p.stderr
    p = fxc_cli("compile", f"{d / 'factory.py'}:nothing", "--input-shape", "2,4", "-o", tmp_path / "m.fxc", ok=False)
    assert "has no 'nothing'" in p.stderr
    assert not (tmp_path / "m.fxc").exists()
