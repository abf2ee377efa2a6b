"""Scaffolding the device targets' tests share (tests/backends/test_every_target.py and the per-target folders).

Takes a target name and what a test expects of it; produces the fixed op sample (`CASES`), its per-case check
(`check_op_sample`), the small conv net the torch paths use (`small_net`), the export-then-load-in-a-process-without-
torch check (`export_and_load_without_torch`), the renderers' loop-IR fixture (`fixture_kernel`), the checks the
GPU-family targets share (`check_tiled_gemm`, `check_folded_grid`, `check_int64_embedding`...) and the scripts that
build with a missing driver in a fresh process (`target_error_script`, `run_script`). Every check compares with the
op's numpy reference or eager torch.
"""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import fxc
from fxc.driver.build import build
from fxc.lowering.loop_ir import Buffer, For, Kernel, Store, seq
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.symbolic.expr import Broadcast, Const, Var, VecLoad, as_expr, binary, cast, compare, select, unary
from tests.helpers import assert_close_np
from tests.helpers_export import LOAD_AND_RUN, check_runtime_report, run_blocked

ROOT = Path(__file__).resolve().parents[1]

# every fusion kind: elementwise, broadcast, injective, reduction, out-elemwise-fusable (conv, matmul) and opaque
# (hand-written loop IR: sort, scans, linalg, scatter, gather), with int, bool and float64 samples among them
OP_SAMPLE = ("add", "exp", "where", "cast", "floordiv", "remainder", "logical_and", "isnan", "erf", "pow",
             "permute", "pad", "cat", "slice", "gather", "index_select", "embedding", "scatter", "index_put",
             "sum", "mean", "amax", "argmax", "softmax", "log_softmax", "layer_norm", "cumsum", "sort",
             "conv2d", "conv_transpose2d", "matmul", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
             "cholesky", "lgamma", "grid_sample", "resize2d", "random_uniform")
CASES = [(name, k) for name in OP_SAMPLE for k in range(min(2, len(all_ops()[name].samples(np.random.default_rng(0)))))]
CASE_IDS = [f"{n}-{k}" for n, k in CASES]


def sample_graph(name: str, arrays, attrs):
    """A graph of one call of op `name` on inputs shaped and typed as `arrays`."""
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype) if a.dtype != np.bool_ else "bool") for a in arrays]
    outs = b.graph.call(name, ins, **attrs)
    b.graph.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return b.graph


def check_op_sample(target: str, name: str, k: int, refused: dict = None, in_wasm: set = None):
    """Builds sample k of op `name` for `target` and compares every output with the op's numpy reference.

    `refused` maps the cases the target must refuse to (error class, message pattern or None): the build raises it.
    `in_wasm`, for the browser targets that run what their shaders cannot as wasm kernels in the page: exactly these
    cases have a "[wasm in the page:" kernel. Returns the module (None for a refused case)."""
    op = all_ops()[name]
    arrays, attrs = op.samples(np.random.default_rng(k))[k]
    graph = sample_graph(name, arrays, attrs)
    if refused and (name, k) in refused:
        error, match = refused[name, k]
        with pytest.raises(error, match=match):
            build(graph, target=target)
        return None
    module = build(graph, target=target)
    assert module.target.split()[0] == target, module.target
    if in_wasm is not None:
        assert any("[wasm in the page:" in line for line in module.kernels) == ((name, k) in in_wasm), module.kernels
    got = module(*arrays)
    got = got if isinstance(got, list) else [got]
    ref = op.reference(*arrays, **attrs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert len(got) == len(ref) == len(graph.outputs)
    for o, g, r in zip(graph.outputs, got, ref):
        assert g.shape == tuple(o.shape)
        assert_close_np(g, np.asarray(r).astype(g.dtype))
    return module


def small_net():
    """conv, batch norm, relu, pooling and a linear layer: the small model the torch and export tests run."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()


def export_and_load_without_torch(target: str, tmp_path) -> zipfile.ZipFile:
    """fxc.from_torch(small_net, target) -> fxc.export -> fxc.load in a process that cannot import torch, llvmlite or
    the compiler; both runs match eager. Returns the artifact, opened, for the caller's checks of its files."""
    model, x = small_net(), torch.randn(1, 3, 10, 10)
    compiled = fxc.from_torch(model, (x,), target=target)
    with torch.no_grad():
        expected = model(x).numpy()
    assert_close_np(compiled(x.numpy()), expected)
    path = fxc.export(compiled, tmp_path / "m.fxc")
    np.save(tmp_path / "x.npy", x.numpy())
    check_runtime_report(run_blocked(LOAD_AND_RUN, path, tmp_path / "x.npy", tmp_path / "out.npz"))
    with np.load(tmp_path / "out.npz") as z:
        assert_close_np(z["arr_0"], expected)
    return zipfile.ZipFile(path)


def target_error_script(target: str, *says: str) -> str:
    """A script that builds exp(x) for `target` and exits 0 only if that raises a TargetError whose message has every
    string of `says` (1: no error at all, 3: another message)."""
    return f"""
import sys
from fxc.errors import TargetError
from fxc.relay_like.builder import Builder
from fxc.driver.build import build
from fxc.symbolic.expr import Broadcast, Const, Var, VecLoad, as_expr, binary, cast, compare, select, unary
from fxc.lowering.loop_ir import Buffer, For, Kernel, Store, seq
b = Builder(); v = b.graph.input((4,), "float32"); b.graph.outputs = [b.call("exp", [v])]
try:
    build(b.graph, target={target!r})
    sys.exit(1)
except TargetError as e:
    print("TargetError:", e)
    sys.exit(0 if all(s in str(e) for s in {list(says)!r}) else 3)
"""


def run_script(script: str, *args, timeout: int = 120, **env) -> subprocess.CompletedProcess:
    """Runs `script` in a fresh Python with this checkout on its path and `env` added to the environment."""
    e = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=e,
                          timeout=timeout)


# ------------------------------------------------------------------ the renderers' shared loop-IR fixture
def fixture_kernel(rows: int, cols: int) -> Kernel:
    """y[r, c] = (x > 0 ? exp(x) : 2x) + rowsum(x) + (int)(x * 3) // 2, rows in parallel, 16-lane vector stores."""
    x, y = Buffer("x", "float32", rows * cols), Buffer("y", "float32", rows * cols)
    acc = Buffer("acc", "float32", 1, "private")
    r, c, c2 = Var("r"), Var("c"), Var("c")
    zero = Const(0, "int64")
    v = x[r * cols + c]
    rowsum = For(c, cols, Store(acc, zero, acc[zero] + v))
    val = select(compare("gt", v, 0.0), unary("exp", v), v * 2.0) + acc[zero]
    val = val + cast("float32", binary("floordiv", cast("int32", v * 3.0), as_expr(2, "int32")))
    lanes = 16
    vec = For(c2, cols // lanes, Store(y, r * cols + c2 * lanes,
                                       VecLoad(y, r * cols + c2 * lanes, lanes) + Broadcast(Const(1.0, "float32"),
                                                                                            lanes)))
    body = For(r, rows, seq(Store(acc, zero, Const(0.0, "float32")), rowsum,
                            For(c, cols, Store(y, r * cols + c, val)), vec), "parallel")
    return Kernel("fixture", [y, x], body)


def fixture_expected(x):
    """What fixture_kernel computes, in numpy."""
    rowsum = x.sum(axis=1, keepdims=True)
    out = np.where(x > 0, np.exp(x), 2 * x) + rowsum + np.floor_divide(np.trunc(x * 3).astype(np.int32), 2)
    return (out + 1).astype(np.float32)


def fixture_launches(k: Kernel, index_bits=None) -> tuple:
    """Kernel k split into a device's launches (work-groups of 4) and scalarized: (kernels, plan of Launches)."""
    from fxc.lowering.legalize import scalarize
    from fxc.lowering.loop_ir import launch_of
    from fxc.lowering.schedules.gpu import Knobs
    from fxc.lowering.schedules.gpu.from_loops import split_launches
    from fxc.runtime.launch import Launch
    kernels = []
    for i, body in enumerate(split_launches(k.body, Knobs(work_group_size=4))):
        body = scalarize(body)
        bits = {} if index_bits is None else {"index_bits": index_bits}
        kernels.append(Kernel(f"{k.name}_{i}", k.params, body, launch=launch_of(body), **bits))
    plan = [Launch(kk.name, [("out", 0), ("in", 0)], kk.launch.grid, kk.launch.block) for kk in kernels]
    return kernels, plan


def check_tiled_gemm(target: str, shared: bool, monkeypatch):
    """The GEMM schedule in one form (local-memory blocks if `shared`, else register tiles), 8x8 tiles, over a batched
    matmul with a bias + relu epilogue and sizes that leave partial tiles: equal to numpy. Returns the module."""
    from fxc.lowering.schedules import gpu
    monkeypatch.setattr(gpu.Knobs, "for_caps", staticmethod(lambda caps: gpu.Knobs(gemm_tile=8, gemm_shared=shared)))
    rng = np.random.default_rng(3)
    a, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((3, 37, 50), (50, 29), (29,)))
    b = Builder()
    va, vw, vb = (b.graph.input(x.shape, "float32") for x in (a, w, bias))
    b.graph.outputs = [b.call("relu", [b.call("add", [b.call("matmul", [va, vw]), vb])])]
    m = build(b.graph, target=target)
    assert "block 8x8" in m.kernels[0], m.kernels
    assert_close_np(m(a, w, bias), np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-5)
    return m


# ------------------------------------------------------------------ checks the GPU-family targets share


def check_folded_grid(target: str):
    """More than 65535 work-groups on one axis (neg of 4M elements): split over two dispatch axes, recombined in the
    shader; equal to numpy."""
    x = np.random.default_rng(2).standard_normal(65536 * 64 + 3).astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = [b.call("neg", [v])]
    m = build(b.graph, target=target)
    assert "65535u" in m.source
    np.testing.assert_array_equal(m(x), -x)
    return m


def check_binary_ops(target: str, ops, a, e) -> None:
    """Each of `ops` (those the registry has) on float32 arrays a and e against the op's numpy reference."""
    for op in ops:
        if op not in all_ops():
            continue
        b = Builder()
        x, y = b.graph.input(a.shape, "float32"), b.graph.input(e.shape, "float32")
        b.graph.outputs = [b.call(op, [x, y])]
        got = build(b.graph, target=target)(a, e)
        assert_close_np(got, np.asarray(all_ops()[op].reference(a, e)).astype(np.float32))


def check_int64_embedding(target: str) -> None:
    """int64 indices (an embedding) run in 32 bits: an int64 value beyond 32 bits is an ExecutionError, never a wrong
    row, and the next call is right again; an index out of range is eager's IndexError (never a clamped row)."""
    from fxc.errors import ExecutionError, IndexOutOfRangeError
    w = np.random.default_rng(3).standard_normal((50, 8)).astype(np.float32)
    b = Builder()
    vw, vi = b.graph.input(w.shape, "float32"), b.graph.input((1, 4), "int64")
    b.graph.outputs = [b.call("embedding", [vw, vi])]
    m = build(b.graph, target=target)
    assert_close_np(m(w, np.array([[0, 7, 49, 3]], np.int64)), w[[0, 7, 49, 3]][None])
    with pytest.raises(ExecutionError, match="int64 value beyond 32 bits"):
        m(w, np.array([[0, 2 ** 40, 1, 2]], np.int64))
    assert_close_np(m(w, np.array([[1, 2, 3, 4]], np.int64)), w[[1, 2, 3, 4]][None])     # the flag was reset
    with pytest.raises(IndexOutOfRangeError, match="embedding: index 50 is out of range for a dimension of size 50"):
        m(w, np.array([[0, 50, 1, 2]], np.int64))
    assert_close_np(m(w, np.array([[4, 3, 2, 1]], np.int64)), w[[4, 3, 2, 1]][None])


def check_int_division_by_zero(target: str):
    """int32 floor division: equal to numpy, and a zero divisor is an ExecutionError. Returns the module."""
    from fxc.errors import ExecutionError
    b = Builder()
    x, y = b.graph.input((4,), "int32"), b.graph.input((4,), "int32")
    b.graph.outputs = [b.call("floordiv", [x, y])]
    m = build(b.graph, target=target)
    a = np.array([7, -7, 5, 1], np.int32)
    np.testing.assert_array_equal(m(a, np.array([2, 2, -3, 1], np.int32)), np.floor_divide(a, [2, 2, -3, 1]))
    with pytest.raises(ExecutionError, match="division by zero"):
        m(a, np.array([2, 0, 1, 1], np.int32))
    return m


