"""Export of dynamic models (issue 26): one artifact for every size in the declared range, run by `fxc.load` (numpy
only, in a process that cannot import torch or llvmlite) and by C's `fxc_main_shaped` (a real C program built with
the system compiler), compared with eager PyTorch at three sizes; sizes outside the range, of another static dim,
inconsistent between inputs or breaking a divisor are named errors; old (format 1, ABI 1) artifacts still load and
run."""
import ctypes
import json
import platform
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
from fxc.errors import ArtifactError, InputError
from fxc.relay_like.graph import Graph
from fxc.runtime.artifact.extract import extract
from fxc.runtime.artifact.read import LIBRARY, MANIFEST
from fxc.symbolic.expr import Sym
from fxc.symbolic.sym import SymInfo

from ..helpers import assert_close_np
from ..helpers_export import (
    BLOCKER,
    build_c_example,
    check_runtime_report,
    onnx_with_named_batch,
    run_blocked,
    run_cli_blocked,
)
from .test_export import _rewrite

ROOT = Path(__file__).resolve().parents[2]
SIZES = (1, 5, 17)        # a remainder row alone, a block-less batch, two row blocks and a remainder


def _eager(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """(eager model, artifact path) of an MLP exported from fxc.from_torch with a batch in [1, 64]."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
    compiled = fxc.from_torch(model, (torch.randn(4, 16),), dynamic_shapes=({0: Dim("batch", min=1, max=64)},))
    return model, fxc.export(compiled, tmp_path_factory.mktemp("dyn") / "mlp.fxc")


def _manifest(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read(MANIFEST))


def test_manifest_records_the_symbols(mlp):
    _, path = mlp
    m = _manifest(path)
    assert m["format_version"] == 2 and m["c_abi"]["abi_version"] == 2
    (sym,) = m["symbols"]
    assert (sym["min"], sym["max"], sym["divisor"]) == (1, 64, 1)
    assert m["inputs"][0]["shape"] == [sym["name"], 16] and m["outputs"][0]["shape"] == [sym["name"], 8]
    # (its kernels may keep every intermediate in registers: the symbolic workspace slots are ResNet-18's test's)


RUN_SIZES = BLOCKER + """
import json, os
import numpy as np
import fxc
from fxc.errors import InputError
module = fxc.load(sys.argv[1])
inputs = np.load(sys.argv[2])
np.savez(sys.argv[3], *[module(inputs[k]) for k in sorted(inputs.files)])
errors = []
for shape in json.loads(sys.argv[4]):           # each must be an InputError, never a run
    try:
        module(np.zeros(shape, np.float32))
        errors.append(None)
    except InputError as e:
        errors.append(str(e))
mods = sorted(n for n in sys.modules if n == "fxc" or n.startswith("fxc."))
bad = sorted(n for n in sys.modules if any(n == b or n.startswith(b + ".") for b in BLOCKED))
print(json.dumps({"modules": mods, "bytes": sum(os.path.getsize(sys.modules[n].__file__) for n in mods),
                  "blocked_loaded": bad, "errors": errors}))
"""


def _run_without_torch(path, xs: list, bad_shapes: list, tmp_path) -> tuple:
    """(outputs at xs, messages of the InputErrors at bad_shapes, runtime report) from fxc.load in a fresh
    interpreter where torch, llvmlite and the compiler cannot be imported."""
    np.savez(tmp_path / "in.npz", **{f"x{k:02d}": x for k, x in enumerate(xs)})
    report = run_blocked(RUN_SIZES, path, tmp_path / "in.npz", tmp_path / "out.npz", json.dumps(bad_shapes))
    check_runtime_report(report)
    with np.load(tmp_path / "out.npz") as z:
        outs = [z[f"arr_{k}"] for k in range(len(xs))]
    return outs, report["errors"], report


def test_load_runs_three_sizes_without_torch(mlp, tmp_path):
    model, path = mlp
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((n, 16)).astype(np.float32) for n in SIZES]
    outs, errors, report = _run_without_torch(path, xs, [[65, 16], [0, 16], [5, 17], [5, 16, 1]], tmp_path)
    for x, y in zip(xs, outs):
        assert_close_np(y, _eager(model, x))
    assert "outside the compiled range [1, 64]" in errors[0] and "= 65" in errors[0]
    assert "outside the compiled range" in errors[1]
    assert "expected shape" in errors[2] and "[5, 17]" in errors[2]
    assert "expected 2 dims" in errors[3]
    assert report["bytes"] < 80_000, report      # the dynamic runtime (+ symbols.py, cpu/dynamic.py) stays tiny too
    #                                              (issue 41: sizes checked before any allocation, ~2.5 KB; issue 39:
    #                                              a foreign architecture's library refused, ~2 KB; issue 42: sizes
    #                                              that are polynomials of the symbols, s+1 or s0*s1, ~1 KB)


def test_cli_runs_and_inspects_a_dynamic_artifact(mlp, tmp_path):
    """`fxc run` at a batch of 3 and `fxc inspect` (showing the symbol's range), importing only the runtime."""
    model, path = mlp
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = ["run", str(path), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")]
    for argv in (run, ["inspect", str(path)]):
        p = run_cli_blocked(argv)
    assert "in [1, 64]" in p.stdout and "C ABI 2" in p.stdout, p.stdout
    assert_close_np(np.load(tmp_path / "y.npy"), _eager(model, x))


def test_edited_range_is_refused(mlp, tmp_path):
    """The library's fxc_interface() carries the ranges: a manifest widened to let larger sizes through (past the
    workspace the C entry allocates) is refused at load."""
    _, path = mlp

    def widen(m):
        m["symbols"][0]["max"] = 1 << 40
    with pytest.raises(ArtifactError, match="manifest was edited"):
        fxc.load(_rewrite(path, tmp_path / "wide.fxc", manifest=widen))


@pytest.mark.parametrize("edit", [
    lambda m: m["symbols"][0].update(min=70),                      # max < min
    lambda m: m["symbols"][0].update(divisor=0),
    lambda m: m["symbols"][0].update(max="64"),
    lambda m: m["symbols"].append(dict(m["symbols"][0])),          # a name twice
    lambda m: m["inputs"][0]["shape"].__setitem__(0, "q"),          # a dim naming no symbol
    lambda m: m["inputs"][0]["shape"].__setitem__(0, "0*" + m["symbols"][0]["name"]),
    lambda m: m.update(format_version=1),
    lambda m: m.pop("sym_header"),
    lambda m: m["plan"][0]["args"][0].__setitem__(1, [64, -8, 0]),
], ids=["range", "divisor", "type", "twice", "unknown", "zero", "version", "header", "slot"])
def test_malformed_symbol_fields_are_named(mlp, tmp_path, edit):
    _, path = mlp
    with pytest.raises(ArtifactError, match="malformed|unknown artifact format"):
        fxc.load(_rewrite(path, tmp_path / "bad.fxc", manifest=edit))


def _c_program(artifact, tmp_path) -> tuple:
    """(the extracted folder, examples/c/run_shaped.c built against it with gcc -Wall -Wextra -Werror)."""
    d = extract(artifact, tmp_path / "model")
    return d, build_c_example("run_shaped", d, tmp_path / "run_shaped")


def _run_c(exe, d, args: list) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), str(d), *map(str, args)], capture_output=True, text=True, timeout=120)


def _dims(shape) -> str:
    return "x".join(map(str, shape))


def test_c_shaped_entry_three_sizes(mlp, tmp_path):
    """fxc_output_dims + fxc_main_shaped from a C program at three sizes give eager PyTorch's outputs; dims outside
    the model's are FXC_ERR_SHAPE with a message (the program exits 1 before reading any input)."""
    model, path = mlp
    d, exe = _c_program(path, tmp_path)
    rng = np.random.default_rng(1)
    for n in SIZES:
        x = rng.standard_normal((n, 16)).astype(np.float32)
        x.tofile(tmp_path / "x.bin")
        p = _run_c(exe, d, [_dims(x.shape), tmp_path / "x.bin", tmp_path / "y.bin"])
        assert p.returncode == 0, p.stderr
        assert p.stdout.split()[:5] == ["output", "0", "output0", "float32", f"{n}x8"], p.stdout
        assert int(p.stdout.split()[5]) == n * 8 * 4
        assert_close_np(np.fromfile(tmp_path / "y.bin", np.float32).reshape(n, 8), _eager(model, x))
    for dims, words in (("65x16", "outside the compiled range [1, 64]"), ("0x16", "outside the compiled range"),
                        ("5x17", "dim 1 is 17; expected 16"), ("-3x16", "expected a multiple of")):
        p = _run_c(exe, d, [dims, tmp_path / "x.bin", tmp_path / "y.bin"])
        assert p.returncode == 1 and words in p.stderr, (dims, p.stderr)


def test_c_fxc_main_refuses_a_dynamic_model(mlp, tmp_path):
    """ABI 1's fxc_main has no dims: on a model with size symbols it is FXC_ERR_ARGUMENT naming fxc_main_shaped."""
    _, path = mlp
    d = extract(path, tmp_path / "model")
    lib = ctypes.CDLL(str(d / LIBRARY))
    lib.fxc_last_error.restype = ctypes.c_char_p
    assert lib.fxc_init(str(d).encode()) == 0
    assert lib.fxc_num_symbols() == 1
    lib.fxc_symbol.restype = ctypes.POINTER(ctypes.c_int64 * 4)    # {name, min, max, divisor}
    assert list(lib.fxc_symbol(0).contents)[1:] == [1, 64, 1] and not lib.fxc_symbol(1)
    buf = (ctypes.c_void_p * 1)()
    assert lib.fxc_main(buf, buf) == -4 and b"fxc_main_shaped" in lib.fxc_last_error()


def _product_graph():
    """x * y of two [n, 16] inputs with n in [4, 32], a multiple of 4 (a divisor the runtime checks)."""
    g = Graph()
    n = Sym("n")
    x, y = g.input((n, 16), "float32", "x"), g.input((n, 16), "float32", "y")
    g.outputs = [g.call1("mul", [x, y])]
    g.symbols = {"n": SymInfo("n", 4, 32, 4)}
    return g


def test_divisor_and_inconsistent_inputs(tmp_path):
    """A symbol's divisor and two inputs that must agree: checked by fxc.load's module and by the C entry."""
    from fxc.driver.build import build
    path = fxc.export(build(_product_graph()), tmp_path / "prod.fxc")
    assert _manifest(path)["symbols"] == [{"name": "n", "min": 4, "max": 32, "divisor": 4}]
    m = fxc.load(path)
    a = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(m(a, a + 1), a * (a + 1))
    with pytest.raises(InputError, match="not a multiple of 4"):
        m(a[:6], a[:6])
    with pytest.raises(InputError, match="n = 4 here but 8"):
        m(a, a[:4])
    d, exe = _c_program(path, tmp_path)
    a.tofile(tmp_path / "a.bin")
    (a + 1).tofile(tmp_path / "b.bin")
    p = _run_c(exe, d, ["8x16", tmp_path / "a.bin", "8x16", tmp_path / "b.bin", tmp_path / "y.bin"])
    assert p.returncode == 0, p.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "y.bin", np.float32).reshape(8, 16), a * (a + 1))
    for args, words in ((["6x16", "6x16"], "n = 6 is not a multiple of 4"),
                        (["8x16", "4x16"], "gives n = 4, another input 8"),
                        (["36x16", "36x16"], "outside the compiled range [4, 32]")):
        p = _run_c(exe, d, [args[0], tmp_path / "a.bin", args[1], tmp_path / "b.bin", tmp_path / "y.bin"])
        assert p.returncode == 1 and words in p.stderr, (args, p.stderr)


def test_c_shaped_entry_on_a_static_artifact(tmp_path):
    """A static model (format 1) also has fxc_main_shaped: it runs at its exported dims and refuses others."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU()).eval()
    x = torch.randn(3, 6)
    path = fxc.export(fxc.from_torch(model, (x,)), tmp_path / "static.fxc")
    assert _manifest(path)["format_version"] == 1 and "symbols" not in _manifest(path)
    d, exe = _c_program(path, tmp_path)
    x.numpy().tofile(tmp_path / "x.bin")
    p = _run_c(exe, d, ["3x6", tmp_path / "x.bin", tmp_path / "y.bin"])
    assert p.returncode == 0 and "3x4 48" in p.stdout, p.stderr
    assert_close_np(np.fromfile(tmp_path / "y.bin", np.float32).reshape(3, 4), _eager(model, x.numpy()))
    p = _run_c(exe, d, ["4x6", tmp_path / "x.bin", tmp_path / "y.bin"])
    assert p.returncode == 1 and "dim 0 is 4; expected 3" in p.stderr, p.stderr


OLD = ROOT / "tests" / "artifacts"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the stored old artifact is x86-64 code")
def test_old_format_1_artifact_loads_and_runs(tmp_path):
    """An artifact written before format 2 / ABI 2 (tests/artifacts/v1_mlp.fxc, see its README) still loads in
    Python and runs through its ABI 1 fxc_main from examples/c/run_model.c."""
    path, x, expected = OLD / "v1_mlp.fxc", np.load(OLD / "v1_mlp_input.npy"), np.load(OLD / "v1_mlp_output.npy")
    assert _manifest(path)["format_version"] == 1 and "abi_version" not in _manifest(path)["c_abi"]
    assert_close_np(fxc.load(path)(x), expected)
    d = extract(path, tmp_path / "model")
    assert "#define FXC_ABI_VERSION 1" in (d / "fxc_model.h").read_text()
    exe = build_c_example("run_model", d, tmp_path / "run_model", strict=False)
    x.tofile(tmp_path / "x.bin")
    p = subprocess.run([str(exe), str(d), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert_close_np(np.fromfile(tmp_path / "y.bin", np.float32).reshape(expected.shape), expected)


def test_from_onnx_named_dim_exports_one_artifact(tmp_path):
    """An ONNX model with a named batch dim: its symbolic build exported, run at three sizes by fxc.load."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 5)).eval()
    onnx_model = fxc.from_onnx(onnx_with_named_batch(model, torch.randn(3, 12)))
    rng = np.random.default_rng(4)
    onnx_model(rng.standard_normal((3, 12)).astype(np.float32))       # binds the shapes: the symbolic build
    path = fxc.export(onnx_model, tmp_path / "onnx.fxc")
    assert [s["name"] for s in _manifest(path)["symbols"]] == ["batch"]
    m = fxc.load(path)
    for n in SIZES:
        x = rng.standard_normal((n, 12)).astype(np.float32)
        assert_close_np(m(x), _eager(model, x))


@pytest.mark.slow
def test_resnet18_dynamic_batch_artifact_three_sizes(tmp_path):
    """ResNet-18 (32 x 32 images) from fxc.from_torch with a batch in [1, 16], exported once, run at three batch
    sizes by fxc.load without torch, against eager."""
    from fxc.testing.models import make_model
    model = make_model("resnet18")
    compiled = fxc.from_torch(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({0: Dim("batch", min=1, max=16)},))
    path = fxc.export(compiled, tmp_path / "resnet18.fxc")
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((n, 3, 32, 32)).astype(np.float32) for n in (1, 3, 9)]
    outs, errors, _ = _run_without_torch(path, xs, [[17, 3, 32, 32], [2, 3, 32, 33]], tmp_path)
    for x, y in zip(xs, outs):
        assert_close_np(y, _eager(model, x), atol=1e-4)
    assert "outside the compiled range [1, 16]" in errors[0] and "expected shape" in errors[1]


def test_torch_compile_model_is_pointed_to_from_torch(tmp_path):
    """torch.compile's model (graphs built per call, weights as inputs) is not an artifact: the error names the
    ahead-of-time path with a dynamic batch."""
    compiled = torch.compile(torch.nn.Linear(2, 2), backend="fxc", dynamic=True)
    with pytest.raises(fxc.errors.FxcError, match="dynamic_shapes"):
        fxc.export(compiled, tmp_path / "m.fxc")
    assert not (tmp_path / "m.fxc").exists()


# several symbols (a batch and a sequence): the workspace is a sum of products of them (b x s, b x s x s)
PAIRS = ((1, 3), (4, 50), (2, 17))      # (batch, sequence): the smallest, the largest, one in between


def _attention_graph():
    """softmax(x x^T) x + x of an input [b, s, 8] with b in [1, 4], s in [1, 50]: buffers of b x s and b x s x s
    bytes, offsets that are polynomials of both symbols."""
    b, s = Sym("b"), Sym("s")
    g = Graph()
    x = g.input((b, s, 8), "float32", "x")
    scores = g.call1("matmul", [x, x], trans_b=True)
    g.outputs = [g.call1("add", [g.call1("matmul", [g.call1("softmax", [scores], dim=-1), x]), x])]
    g.symbols = {"b": SymInfo("b", 1, 4), "s": SymInfo("s", 1, 50)}
    return g


def _attention_ref(x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(x)
    return (torch.softmax(t @ t.transpose(1, 2), -1) @ t + t).numpy()


def check_attention_pairs(module) -> None:
    """A two-symbol attention module (any target) against numpy at PAIRS, and s = 51 refused by name."""
    rng = np.random.default_rng(3)
    for b, s in PAIRS:
        x = rng.standard_normal((b, s, 8)).astype(np.float32)
        np.testing.assert_allclose(module(x), _attention_ref(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="s = 51 is outside"):
        module(np.zeros((2, 51, 8), np.float32))


def test_two_symbols_export_python_and_c(tmp_path):
    """A graph with two symbols whose workspace slots are sums of products (b x s, b x s x s): exported (format 2
    with `sym_bytes`), run at three (b, s) pairs by fxc.load without torch and by run_shaped.c, against torch;
    sizes outside either range are refused in both."""
    from fxc.driver.build import build
    module = build(_attention_graph())
    assert any(k == "work" and isinstance(ix, tuple) and len(ix) == 2 for _, slots in module.plan for k, ix in slots)
    path = fxc.export(module, tmp_path / "two.fxc")
    m = _manifest(path)
    assert [s["name"] for s in m["symbols"]] == ["b", "s"]
    assert sorted(map(sorted, (t[1] for t in m["sym_bytes"]))) == [["b", "s"], ["b", "s", "s"]]
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((b, s, 8)).astype(np.float32) for b, s in PAIRS]
    outs, errors, _ = _run_without_torch(path, xs, [[5, 3, 8], [2, 51, 8]], tmp_path)
    for x, y in zip(xs, outs):
        assert_close_np(y, _attention_ref(x))
    assert "b = 5 is outside" in errors[0] and "s = 51 is outside" in errors[1]
    d, exe = _c_program(path, tmp_path)
    for x in xs:
        x.tofile(tmp_path / "x.bin")
        p = _run_c(exe, d, [_dims(x.shape), tmp_path / "x.bin", tmp_path / "y.bin"])
        assert p.returncode == 0, p.stderr
        assert_close_np(np.fromfile(tmp_path / "y.bin", np.float32).reshape(x.shape), _attention_ref(x))
    p = _run_c(exe, d, ["2x51x8", tmp_path / "x.bin", tmp_path / "y.bin"])
    assert p.returncode == 1 and "s = 51 is outside the compiled range [1, 50]" in p.stderr, p.stderr


def test_edited_workspace_terms_are_refused(tmp_path):
    """The workspace's symbolic size is in the library's interface: a manifest whose `sym_bytes` was shrunk (so a
    runtime would allocate too little) is refused at load."""
    from fxc.driver.build import build
    path = fxc.export(build(_attention_graph()), tmp_path / "two.fxc")

    def shrink(m):
        m["sym_bytes"][0][0] = 1
    with pytest.raises(ArtifactError, match="manifest was edited"):
        fxc.load(_rewrite(path, tmp_path / "small.fxc", manifest=shrink))


def test_bert_batch_and_sequence_artifact(tmp_path):
    """BERT (2 layers, hidden 64) from fxc.from_torch with a batch Dim and a sequence Dim: one artifact run at three
    (batch, sequence) pairs by fxc.load without torch and by run_shaped.c (int64 ids and mask), against eager."""
    from ..capture.torch.test_dynamic_seq import _bert_inputs, _bert_small
    model = _bert_small()
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=2, max=64)
    compiled = fxc.from_torch(model, _bert_inputs(2, 16), dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    path = fxc.export(compiled, tmp_path / "bert.fxc")
    assert len(_manifest(path)["symbols"]) == 2
    pairs = ((1, 2), (4, 64), (3, 23))
    ins = [[t.numpy() for t in _bert_inputs(b, s)] for b, s in pairs]
    with torch.no_grad():
        refs = [model(*_bert_inputs(b, s)).numpy() for b, s in pairs]
    d, exe = _c_program(path, tmp_path)
    for (ids, mask), ref in zip(ins, refs):
        ids.tofile(tmp_path / "ids.bin")
        mask.tofile(tmp_path / "mask.bin")
        p = _run_c(exe, d, [_dims(ids.shape), tmp_path / "ids.bin", _dims(mask.shape), tmp_path / "mask.bin",
                            tmp_path / "y.bin"])
        assert p.returncode == 0, p.stderr
        assert_close_np(np.fromfile(tmp_path / "y.bin", np.float32).reshape(ref.shape), ref, atol=1e-4)
    m = fxc.load(path)
    for (ids, mask), ref in zip(ins, refs):
        assert_close_np(m(ids, mask), ref, atol=1e-4)
    with pytest.raises(InputError, match="outside the compiled range"):
        m(*[t.numpy() for t in _bert_inputs(2, 65)])
