"""`fxc.export` + `fxc.load` of a dynamic (symbolic batch) build on the device targets (issue 26 item 2): opencl,
opengl and webgpu write the format 2 device manifest with row launches (fxc/driver/rows.py; webgl's own test is in
tests/backends/webgl/test_dynamic_webgl.py), wasm its llvm kernels' symbol header and workspace terms. The artifact
runs in a fresh
interpreter where torch, llvmlite and the compiler cannot be imported, at three batches against eager PyTorch; a
batch outside the range is the named InputError. A missing device runtime is a failure, not a skip."""
import json
import zipfile

import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
import fxc.driver.build as BUILD
from fxc.errors import ArtifactError
from fxc.runtime.artifact.read import MANIFEST

from ..helpers import assert_close_np
from ..helpers_export import check_runtime_report, run_blocked, run_cli_blocked
from .test_export_dynamic import RUN_SIZES, _attention_graph, check_attention_pairs

TARGETS = ("opencl", "opengl", "webgpu", "wasm")
BATCHES = (3, 17, 5)        # rows after no block, two blocks (the arena grown), one (a smaller size in a larger arena)


def _convnet():
    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 5), torch.nn.Softmax(-1)).eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """target -> (eager model, its dynamic artifact): the conv net with a batch in [1, 20], built once per target."""
    made = {}

    def get(target):
        if target not in made:
            model = _convnet()
            compiled = fxc.from_torch(model, (torch.randn(2, 3, 6, 6),),
                                      dynamic_shapes=({0: Dim("batch", min=1, max=20)},), target=target)
            made[target] = model, fxc.export(compiled, tmp_path_factory.mktemp(target) / "convnet.fxc")
        return made[target]
    return get


@pytest.mark.targets(*TARGETS)
def test_dynamic_export_runs_any_batch_in_range_without_torch(target, exported, tmp_path):
    model, path = exported(target)
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read(MANIFEST))
    assert manifest["format_version"] == 2 and manifest["target"].split(" ")[0] == target
    assert [(s["min"], s["max"]) for s in manifest["symbols"]] == [(1, 20)]
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((n, 3, 6, 6)).astype(np.float32) for n in BATCHES]
    np.savez(tmp_path / "in.npz", **{f"x{k:02d}": x for k, x in enumerate(xs)})
    report = run_blocked(RUN_SIZES, path, tmp_path / "in.npz", tmp_path / "out.npz", "[[21, 3, 6, 6], [4, 3, 6, 7]]")
    check_runtime_report(report)    # as the static device artifacts (fxc.runtime.store is the runtime's)
    with np.load(tmp_path / "out.npz") as z:
        outs = [z[f"arr_{k}"] for k in range(len(xs))]
    errors = report["errors"]
    with torch.no_grad():
        for x, y in zip(xs, outs):
            assert y.shape == (len(x), 5)
            assert_close_np(y, model(torch.from_numpy(x)).numpy())
    assert "outside the compiled range [1, 20]" in errors[0] and "= 21" in errors[0]
    assert "expected shape" in errors[1]
    if target == "webgpu":      # its web package has no symbolic page: a named error, never a wrong page
        from fxc.deploy.web import write_package
        with pytest.raises(ArtifactError, match="packages a symbolic batch for webgl only"):
            write_package(path, tmp_path / "site")
    shown = run_cli_blocked(["inspect", str(path)]).stdout     # each group's line once, by its first launch
    assert shown.count("matmul+add -> float32[") == 1 and shown.count("relu -> float32[") == 1, shown


@pytest.mark.targets("opencl", "wasm")
@pytest.mark.parametrize("edit", [
    lambda m: m["symbols"][0].update(max=1 << 20),      # sizes past the arena the plan was laid out for
    lambda m: m.update(row_bytes=m["row_bytes"] // 2 if m["row_bytes"] else 8),
    lambda m: m.update(sym_header=m["sym_header"] + 8),
], ids=["range", "row_bytes", "header"])
def test_edited_symbol_fields_are_refused(target, edit, exported, tmp_path):
    """The program's interface line hashes the symbols, row bytes and header: an edited manifest is refused."""
    from .test_export import _rewrite
    with pytest.raises(ArtifactError, match="manifest was edited"):
        fxc.load(_rewrite(exported(target)[1], tmp_path / "bad.fxc", manifest=edit))


def test_wasm_export_of_two_symbols(tmp_path):
    """A batch and a sequence on wasm ([b, s, s] workspace buffers: the manifest's sym_bytes is a sum of products):
    one artifact, fxc.load at each (b, s) pair against torch, a sequence outside its range refused."""
    path = fxc.export(BUILD.build(_attention_graph(), "wasm"), tmp_path / "attention.fxc")
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read(MANIFEST))
    assert [s["name"] for s in manifest["symbols"]] == ["b", "s"] and any(
        len(names) == 3 for _, names in manifest["sym_bytes"])
    module = fxc.load(path)
    check_attention_pairs(module)
