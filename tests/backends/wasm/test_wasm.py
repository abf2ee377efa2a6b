"""The wasm target (the browser CPU path): kernels rendered by the llvm target's renderer, compiled by llvmlite for
wasm32 with SIMD128, linked by Debian's wasm-ld into one .wasm module per model, and run by
fxc/runtime/browser/wasm/runtime.js in a page of the shared browser harness (fxc.runtime.browser.page: one Chromium
per test
process, its pages cross-origin isolated, bulk data as binary files over its loopback server).

Everything the llvm target compiles runs (the same loop IR): the fixed op sample, the reference models, torch.compile
/ from_torch / export / load and an index out of range are in tests/backends/test_every_target.py; here what only
wasm has: its caps and registers, math without libm, two threads, the page's data, the JS runtime's entries and
imports. A missing wasm-ld or browser is a named TargetError (scripts/setup.sh installs Debian's lld and chromium; a
missing one in CI is a failure, not a skip)."""

import numpy as np
import pytest
import torch

import fxc
import fxc.capture.torch.recorder
from fxc.driver.build import build
from fxc.errors import CompileError, TargetError
from fxc.relay_like.builder import Builder
from fxc.target import Target
from tests.helpers import assert_close_np
from tests.helpers_devices import run_script, target_error_script


def test_wasm_target_caps():
    """wasm32 with SIMD128: 4 float32 lanes, one thread, no libm (fxc's own math and the JS runtime's imports)."""
    t = Target.parse("wasm")
    assert t.is_cpu and t.triple == "wasm32-unknown-unknown" and t.mcpu == "generic"
    assert t.caps.lanes == 4 and t.caps.threads == 1 and not t.caps.libm and t.caps.has("simd128")
    assert "+simd128" in t.llvm_features and str(Target.parse(str(t))) == str(t)
    assert not Target.parse("wasm -mattr=-simd128").caps.has("simd128")
    two = Target.parse("wasm -num-threads=2")
    assert two.caps.threads == 2 and two.caps.has("atomics") and "+atomics" in two.llvm_features
    with pytest.raises(TargetError, match="thread count"):
        Target.parse("wasm -num-threads=0")
    with pytest.raises(TargetError, match="unknown option"):
        Target.parse("wasm -mcpu=haswell")


def test_register_tiles_fit_wasm_registers():
    """The CPU schedules' register tiles on wasm: vectors of Caps.lanes (4 float32 = one v128), and a GEMM or
    Winograd tile's accumulators, its weight vectors and the broadcast fit the 16 v128 registers of Caps."""
    from fxc.lowering.schedules.cpu.gemm import row_tile
    from fxc.lowering.schedules.cpu.winograd import tile_rows
    from fxc.relay_like.passes.pack_weights import _lane_vectors
    caps = Target.parse("wasm").caps
    assert caps.lanes == 4 and caps.vector_registers == 16
    for rows in (1, 7, 14, 28, 56, 64, 197):
        for n in (4, 8, 64, 768):
            nv = _lane_vectors(n, rows, caps)
            assert nv * 4 <= max(n, 4) + 3 and row_tile(rows, nv, caps) * nv + nv + 1 <= caps.vector_registers
        for nv in (1, 2, 3):
            assert tile_rows(rows, nv, caps) * nv + nv + 1 <= caps.vector_registers


def test_scalar_and_vector_math_without_libm():
    """exp, log, tanh, erf, sigmoid, sin on float32 are fxc's own code (vectors and scalar tails alike), pow and float64
    math the JS runtime's Math imports; a function neither has is a CompileError naming it at build time."""
    x = np.random.default_rng(1).uniform(-3, 3, (5, 13)).astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    ops = ("exp", "tanh", "erf", "sigmoid", "sin", "cos")
    b.graph.outputs = [b.call(o, [v]) for o in ops] + [b.call("log", [b.call("abs", [v])])]
    got = build(b.graph, target="wasm")(x)
    import math
    ref = [np.exp(x), np.tanh(x), np.vectorize(math.erf)(x), 1 / (1 + np.exp(-x)), np.sin(x), np.cos(x),
           np.log(np.abs(x))]
    for g, r in zip(got, ref):
        assert_close_np(g, r.astype(np.float32), rtol=2e-6, atol=1e-6)
    xd = x.astype(np.float64)
    b = Builder()
    v = b.graph.input(xd.shape, "float64")
    b.graph.outputs = [b.call("exp", [v]), b.call("pow", [v, v])]
    got = build(b.graph, target="wasm")(xd)
    assert_close_np(got[0], np.exp(xd), rtol=1e-12, atol=0)
    assert_close_np(got[1], np.power(xd, xd), rtol=1e-12, atol=0)
    b = Builder()
    v = b.graph.input(xd.shape, "float64")
    b.graph.outputs = [b.call("erf", [v])]
    with pytest.raises(CompileError, match="needs erf,"):
        build(b.graph, target="wasm")


def test_two_threads_share_the_module_memory():
    """-num-threads=2: the page is cross-origin isolated (COOP/COEP), one web worker instantiates the module on its
    shared memory, and the parallel loops of a matmul + tanh go through the pool (its generation counter moves)."""
    rng = np.random.default_rng(5)
    a, w = rng.standard_normal((37, 70)).astype(np.float32), rng.standard_normal((70, 90)).astype(np.float32)
    b = Builder()
    va, vw = b.graph.input(a.shape, "float32"), b.graph.input(w.shape, "float32")
    b.graph.outputs = [b.call("tanh", [b.call("matmul", [va, vw])])]
    m = build(b.graph, target="wasm -num-threads=2")
    for _ in range(2):
        assert_close_np(m(a, w), np.tanh(a @ w))
    workers, generation = m.device.call("""(id) => { const w = window.fxcWasmModels[id].wasm;
        return [w.workers.length, new Int32Array(w.memory.buffer)[w.exports.fxc_pool_gen.value >> 2]]; }""", m._id)
    assert m.device.info["isolated"] and workers == 2 and generation >= 2


def test_two_thread_model_runs_its_plan_on_a_worker():
    """A model built for `wasm -num-threads=2` matches eager, and its plan runs on the plan's web worker (worker 0
    counts the entries it ran: the weight packing, then one plan a call) with the pool worker taking part of the
    parallel loops (the pool's generation counter moves every call), while the page's thread only awaits the answer."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.LayerNorm(96),
                                torch.nn.Linear(96, 32)).eval()
    x = torch.randn(24, 64)
    compiled = fxc.from_torch(model, (x,), target="wasm -num-threads=2")
    with torch.no_grad():
        expected = model(x).numpy()
    m, seen = compiled.module, []
    for _ in range(3):
        assert_close_np(compiled(x).numpy(), expected)
        seen.append(m.device.call("""(id) => { const w = window.fxcWasmModels[id].wasm;
            return [w.workers.length, w.planner === w.workers[0], w.planRuns,
                    new Int32Array(w.memory.buffer)[w.exports.fxc_pool_gen.value >> 2]]; }""", m._id))
    assert all(workers == 2 and planner for workers, planner, _, _ in seen)
    runs, generations = [s[2] for s in seen], [s[3] for s in seen]
    assert runs[0] >= 1 and runs[2] > runs[1] > runs[0]
    assert generations[0] >= 1 and generations[2] > generations[1] > generations[0]


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "files"])
def test_the_page_is_the_shared_browsers_and_data_goes_as_binary(inline, monkeypatch):
    """The wasm page is one page of the process's one browser (fxc.runtime.browser.page); inputs and outputs of several
    dtypes travel as binary files (Page.put / take) or, when small, as base64 within the call (inline), and none is
    left on the server after a call."""
    import fxc.runtime.browser.wasm as wasm_rt
    from fxc.runtime.browser.page import open_browser
    if not inline:
        monkeypatch.setattr(wasm_rt, "INLINE_IN", 0)
        monkeypatch.setattr(wasm_rt, "INLINE_OUT", 0)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 1000)).astype(np.float32)
    i = rng.integers(-5, 5, (3, 1000)).astype(np.int64)
    b = Builder()
    vx, vi = b.graph.input(x.shape, "float32"), b.graph.input(i.shape, "int64")
    b.graph.outputs = [b.call("add", [vx, b.call("cast", [vi], dtype="float32")]), b.call("mul", [vi, vi])]
    m = build(b.graph, target="wasm")
    got = m(x, i)
    assert_close_np(got[0], x + i.astype(np.float32))
    np.testing.assert_array_equal(got[1], i * i)
    page = open_browser().pages["wasm"]
    assert m.device.page is page and page.info["isolated"]
    assert not page.received and not [f for f in page.files if f.startswith(m._files)]


def test_group_entries_run_from_the_js_runtime():
    """The building block of the webgl/webgpu fallback: groups compiled to one wasm module, one entry per group,
    called from runtime.js (FxcWasm.call) on buffers placed in the module's memory."""
    import base64

    from fxc.driver.groups import wasm_group_entries
    from fxc.relay_like.passes.fuse_ops import fuse_ops
    from fxc.runtime.browser.wasm import open_wasm_runtime
    x = np.random.default_rng(2).standard_normal((4, 33)).astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = [b.call("softmax", [b.call("mul", [v, v])], dim=1)]
    groups = fuse_ops(b.graph)
    wasm, names, scratch = wasm_group_entries(groups)
    assert names == [f"fxc_group{i}" for i in range(len(groups))]
    out = open_wasm_runtime().call("""async ([wasm, names, scratch, x, n]) => {
        const w = await FxcWasm.load(Uint8Array.from(atob(wasm), c => c.charCodeAt(0)));
        const a = w.alloc(4 * n), y = w.alloc(4 * n);
        w.write(a, x);
        let cur = a;
        names.forEach((name, i) => {           // a chain: each group's output is the next one's input
          const out = i === names.length - 1 ? y : w.alloc(4 * n);
          if (w.call(name, w.pointers([cur]), w.pointers([out]), 0, w.alloc(scratch[i])).rc) throw new Error(name);
          cur = out; });
        return w.read(y, 4 * n); }""", [base64.b64encode(wasm).decode(), names, scratch,
                                        base64.b64encode(x.tobytes()).decode(), x.size])
    got = np.frombuffer(base64.b64decode(out), np.float32).reshape(x.shape)
    e = np.exp(x * x - (x * x).max(1, keepdims=True))
    assert_close_np(got, e / e.sum(1, keepdims=True))


def test_js_imports_match_the_linker_list():
    """Every name the linker lets the module import is one runtime.js supplies (and no other)."""
    from fxc.backends.wasm.link import JS_IMPORTS
    from fxc.runtime.browser.wasm import open_wasm_runtime
    have = open_wasm_runtime().call("() => Object.keys(FXC_WASM_IMPORTS)")
    assert sorted(have) == sorted(JS_IMPORTS)


def test_no_wasm_ld_is_a_target_error(tmp_path):
    p = run_script(target_error_script("wasm", "apt-get install lld"), FXC_WASM_LD="/nonexistent/wasm-ld",
                   FXC_CACHE_DIR=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr


NO_BROWSER = """
import sys
import numpy as np
from fxc.errors import TargetError
from fxc.relay_like.builder import Builder
from fxc.driver.build import build
import fxc
b = Builder(); v = b.graph.input((4,), "float32"); b.graph.outputs = [b.call("exp", [v])]
m = build(b.graph, target="wasm")          # building and exporting need no browser
fxc.export(m, sys.argv[1])
try:
    m(np.ones(4, np.float32))
    sys.exit(1)
except TargetError as e:
    print("TargetError:", e)
    sys.exit(0 if "no Chromium at /nonexistent/chromium" in str(e) else 3)
"""


def test_no_browser_builds_and_exports_then_a_call_is_a_target_error(tmp_path):
    p = run_script(NO_BROWSER, tmp_path / "m.fxc", FXC_CHROMIUM="/nonexistent/chromium")
    assert p.returncode == 0 and (tmp_path / "m.fxc").exists(), p.stdout + p.stderr
