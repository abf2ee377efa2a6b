"""What keeps cold builds short (fxc/backends/llvm/compile.py): each kernel is a part of its own in a canonical form,
cached as object code by the hash of its IR, so a kernel shared by two graphs compiles once; the kernels'
LLVM pipeline (no SLP vectorizer, the loop vectorizer only where a loop asks for it); the Winograd
transforms as short loops."""
import numpy as np
import pytest

import fxc.backends.llvm.compile as llvm
import fxc.driver.build as fb
import fxc.driver.lower_cpu as lower_cpu
from fxc.relay_like.graph import Graph

HEAD = ['target triple = "x86_64-unknown-linux-gnu"',
        "declare float @llvm.maximum.f32(float, float)",
        "declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)",
        "declare void @fxc_parallel_for(ptr, ptr, i64)",
        "@fxc_div_by_zero = weak global i32 0, align 4", ""]


def _kernel(name: str, par: int, md: int, floor: float = 0.0) -> list:
    """A kernel `name` (x = max(x, floor) in place) with its parallel body `name_par<par>`, whose loop has
    metadata !md."""
    return [f"define internal void @{name}_par{par}(i64 %start, i64 %end, ptr noalias %args) {{",
            "entry:", "  %p = load ptr, ptr %args, !invariant.load !0", "  br label %head", "head:",
            "  %i = phi i64 [ %start, %entry ], [ %n, %head ]", "  %a = getelementptr float, ptr %p, i64 %i",
            "  %x = load float, ptr %a", f"  %y = call float @llvm.maximum.f32(float %x, float {floor:.1f})",
            "  store float %y, ptr %a", "  %n = add i64 %i, 1", "  %c = icmp slt i64 %n, %end",
            f"  br i1 %c, label %head, label %exit, !llvm.loop !{md}", "exit:", "  ret void", "}", "",
            f"define internal void @{name}(ptr noalias %args) nounwind noinline {{", "entry:",
            f"  call void @fxc_parallel_for(ptr @{name}_par{par}, ptr %args, i64 64)", "  ret void", "}", ""]


def _module(kernels: list) -> str:
    """kernels: (name, parallel body number, loop metadata number >= 2[, floor])."""
    calls = [f"  call void @{k[0]}(ptr %inputs)" for k in kernels]
    entry = ["define i32 @fxc_run(ptr %inputs, ptr %outputs, ptr %consts, ptr %work) {", "entry:", *calls,
             "  ret i32 0", "}", ""]
    meta = ["!0 = !{}", '!1 = !{!"llvm.loop.unroll.disable"}']
    for k in kernels:
        meta.append(f"!{k[2]} = distinct !{{!{k[2]}, !1}}")
    body = [line for k in kernels for line in _kernel(*k)]
    return "\n".join(HEAD + body + entry + meta) + "\n"


@pytest.fixture
def per_kernel(monkeypatch):
    """Every kernel is a part of its own, however small."""
    monkeypatch.setattr(llvm, "SMALL_PART", 0)


def test_split_module_gives_a_kernel_the_same_part_in_any_graph(per_kernel):
    # the same kernel at another index, with another parallel body number and other metadata numbers
    a = dict(llvm.split_module(_module([("k3_relu", 7, 4)])))
    b = dict(llvm.split_module(_module([("k0_pad", 0, 2, -1.0), ("k9_relu", 2, 6)])))
    assert a["k3_relu"] == b["k9_relu"]
    part = a["k3_relu"]
    name = part.split("define hidden void @")[1].split("(")[0]
    assert name.startswith("fxc_k") and f"@{name}_par0(" in part and "k3_relu" not in part
    assert "!llvm.loop !1" in part and "!0 = !{}" in part          # metadata renumbered from 0
    assert "@llvm.maximum.f32" in part and "@llvm.fma" not in part  # only the declarations it uses
    assert f"call void @{name}(ptr %inputs)" in a["entry"] and f"declare hidden void @{name}(ptr)" in a["entry"]
    assert list(a) == ["entry", "k3_relu"]
    # the order of the module's declarations depends on the other kernels: not the part's text
    swapped = _module([("k3_relu", 7, 4)]).replace(HEAD[1], "X").replace(HEAD[3], HEAD[1]).replace("X", HEAD[3])
    assert swapped != _module([("k3_relu", 7, 4)]) and dict(llvm.split_module(swapped))["k3_relu"] == part


def _run_in_place(lib) -> list:
    """fxc_run of a test module on x = -32..31 (its kernels work in place); returns x."""
    import ctypes
    x = (ctypes.c_float * 64)(*[float(i - 32) for i in range(64)])
    args = (ctypes.c_void_p * 1)(ctypes.addressof(x))
    run = ctypes.CDLL(str(lib)).fxc_run
    run.argtypes = [ctypes.c_void_p] * 4
    assert run(args, None, None, None) == 0
    return list(x)


def test_split_module_library_runs(tmp_path, monkeypatch, per_kernel):
    """The parts link back into one library whose entry calls every kernel (here: relu in place)."""
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    lib, compiled = llvm.build_library(_module([("k0_relu", 0, 2), ("k1_relu", 1, 3)]))
    assert sorted(compiled) == ["entry", "k0_relu"]     # k1_relu is the same kernel: one part, one object
    assert _run_in_place(lib) == [max(float(i - 32), 0.0) for i in range(64)]


def test_small_kernels_share_parts(tmp_path, monkeypatch):
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    kernels = [(f"k{i}_clamp", i, i + 2, -float(i)) for i in range(5)]       # x = max(x, -i), five kernels
    parts = llvm.split_module(_module(kernels))
    assert len(parts) == 2 and sorted(parts[1][0].split(",")) == [k[0] for k in kernels]
    assert parts[1][1].count("define hidden void @fxc_k") == 5
    assert "\n!14 = " in parts[1][1] and "!15" not in parts[1][1]     # each kernel's 3 metadata, numbered on
    lib, compiled = llvm.build_library(_module(kernels))
    assert len(compiled) == 2 and _run_in_place(lib) == [max(float(i - 32), 0.0) for i in range(64)]


def _graph(extra: bool):
    g = Graph()
    x = g.input((4, 40), "float32", "x")
    out = [g.call1("sum", [g.call1("mul", [g.call1("tanh", [x]), Graph.const(np.full((40,), 3.0, np.float32))])],
                   axes=(1,), keepdim=False)]
    if extra:                               # a kernel before: the shared one gets another index and names
        out.insert(0, g.call1("amax", [g.call1("exp", [x])], axes=(1,), keepdim=False))
    g.outputs = out
    return g


@pytest.fixture
def compiles(tmp_path, monkeypatch, per_kernel):
    """FXC_CACHE_DIR in tmp_path, no module cache; returns (texts of the parts compiled, of all parts split)."""
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    seen, split = [], []
    compile_part, split_module, remote = llvm._compile_part, llvm.split_module, llvm._Worker.compile
    monkeypatch.setattr(llvm, "_compile_part", lambda text, *a: seen.append(text) or compile_part(text, *a))
    monkeypatch.setattr(llvm._Worker, "compile", lambda w, text, *a: seen.append(text) or remote(w, text, *a))
    monkeypatch.setattr(llvm, "split_module", lambda ir: split.append(split_module(ir)) or split[-1])
    return seen, split


def test_kernel_objects_are_cached_across_graphs(compiles):
    seen, split = compiles
    x = np.random.default_rng(0).standard_normal((4, 40)).astype(np.float32)
    first = fb.build(_graph(False))
    n_first = len(seen)
    second = fb.build(_graph(True))
    shared = {t for name, t in split[0] if name != "entry"} & {t for name, t in split[1] if name != "entry"}
    assert shared and len(split[1]) > len(split[0])         # the tanh kernel is in both, under other names
    assert not shared & set(seen[n_first:])                # ... and compiled only for the first graph
    assert len(seen[n_first:]) == len(split[1]) - len(shared)
    np.testing.assert_allclose(first(x), (np.tanh(x) * 3).sum(1), rtol=1e-5)
    a, b = second(x)
    np.testing.assert_allclose(a, np.exp(x).max(1), rtol=1e-5)
    np.testing.assert_allclose(b, (np.tanh(x) * 3).sum(1), rtol=1e-5)
    n = len(seen)
    fb.build(_graph(False))                                 # same IR: the library cache, nothing compiles
    assert len(seen) == n


def test_kernel_pipeline_has_no_slp_but_loop_vectorizer_where_asked():
    tm, triple, _, _ = llvm.target_machine()
    scalar = "\n".join([
        f'target triple = "{triple}"', f'target datalayout = "{tm.target_data}"',
        "define void @f(ptr noalias %a, ptr noalias %b) {", "entry:"]
        + [line for i in range(8) for line in (
            f"  %pa{i} = getelementptr float, ptr %a, i64 {i}", f"  %pb{i} = getelementptr float, ptr %b, i64 {i}",
            f"  %x{i} = load float, ptr %pa{i}", f"  %y{i} = load float, ptr %pb{i}",
            f"  %s{i} = fadd float %x{i}, %y{i}", f"  store float %s{i}, ptr %pa{i}")]
        + ["  ret void", "}",
           "define void @g(ptr noalias %a, ptr noalias %b) {", "entry:", "  br label %loop", "loop:",
           "  %i = phi i64 [ 0, %entry ], [ %n, %loop ]", "  %pa = getelementptr float, ptr %a, i64 %i",
           "  %pb = getelementptr float, ptr %b, i64 %i", "  %x = load float, ptr %pa", "  %y = load float, ptr %pb",
           "  %s = fadd float %x, %y", "  store float %s, ptr %pa", "  %n = add i64 %i, 1",
           "  %c = icmp slt i64 %n, 4096", "  br i1 %c, label %loop, label %exit, !llvm.loop !0", "exit:",
           "  ret void", "}", '!0 = distinct !{!0, !1}', '!1 = !{!"llvm.loop.unroll.disable"}', ""])
    mod = llvm.optimize(scalar)
    f, g = str(mod.get_function("f")), str(mod.get_function("g"))
    assert "x float>" not in f            # SLP off: fxc's straight-line scalar code stays scalar
    assert "x float>" in g                # a loop without vectorize.enable=false is still vectorized


@pytest.fixture
def workers(monkeypatch):
    """Parts go to a compile worker process whatever their size."""
    monkeypatch.setattr(llvm, "WORKER_MIN_IR", 0)
    monkeypatch.setattr(llvm, "COMPILE_PROCESSES", 2)
    sent = []
    real = llvm._Worker.compile
    monkeypatch.setattr(llvm._Worker, "compile", lambda self, text, *a: sent.append(self.ok) or real(self, text, *a))
    return sent


def test_worker_process_compiles_parts(tmp_path, monkeypatch, workers, per_kernel):
    """Parts compiled by the worker process link and run like the others (x = max(x, -i) for i < 6)."""
    import time
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    assert llvm._workers(1)[0].ready()
    here = llvm._compile_part       # slower here, so that the worker surely takes parts
    monkeypatch.setattr(llvm, "_compile_part", lambda *a: time.sleep(0.05) or here(*a))
    kernels = [(f"k{i}_relu", i, i + 2, -float(i)) for i in range(6)]      # six different kernels
    lib, compiled = llvm.build_library(_module(kernels))
    assert len(compiled) == 7 and workers and all(workers)      # the worker was up and took some parts
    assert _run_in_place(lib) == [max(float(i - 32), 0.0) for i in range(64)]


def test_invalid_part_raises_compile_error_through_workers(workers, per_kernel):
    from fxc.errors import CompileError
    bad = [("k0_a", 0, 2), ("k1_b", 1, 3), ("k2_c", 2, 4)]
    text = _module(bad).replace("@llvm.maximum.f32(float %x, float 0.0)", "@llvm.maximum.f32(float %x, i32 0)")
    with pytest.raises(CompileError, match="invalid"):
        llvm.compile_objects(text)


def test_builds_run_with_the_cyclic_gc_paused_and_restore_it(monkeypatch):
    # every full collection walks torch's whole heap (0.1-0.2 s each); a build pauses the collector and puts
    # it back as it found it, also when the build fails
    import gc
    seen = []
    real = fb._build

    def spy(*a, **k):
        seen.append(gc.isenabled())
        return real(*a, **k)
    monkeypatch.setattr(fb, "_build", spy)
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    g = Graph()
    x = g.input((4,), "float32", "x")
    g.outputs.append(g.call1("relu", [x]))
    assert gc.isenabled()
    m = fb.build(g)
    assert seen == [False] and gc.isenabled()
    np.testing.assert_array_equal(m(np.array([-1, 2, -3, 4], np.float32)), [0, 2, 0, 4])

    def broken(*a, **k):
        assert not gc.isenabled()
        raise RuntimeError("boom")
    monkeypatch.setattr(fb, "_build", broken)
    with pytest.raises(RuntimeError):
        fb.build(g)
    assert gc.isenabled()
    gc.disable()
    try:                                # off stays off
        monkeypatch.setattr(fb, "_build", spy)
        fb.build(g)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_gc_pauses_that_overlap_in_two_threads_restore_it_after_the_last():
    import gc
    import threading
    entered, release = threading.Event(), threading.Event()

    def other():
        with fb.gc_paused():
            entered.set()
            release.wait(10)
    t = threading.Thread(target=other)
    assert gc.isenabled()
    with fb.gc_paused():
        t.start()
        assert entered.wait(10)
    assert not gc.isenabled()           # the other thread's pause goes on after this one ended
    release.set()
    t.join()
    assert gc.isenabled()


def _early_net():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()


def _build_threads(monkeypatch):
    import threading

    from fxc.capture.torch.partition import FxcSubgraph
    threads = []
    real = FxcSubgraph.compile

    def spy(self, args):
        threads.append(threading.current_thread().name)
        return real(self, args)
    monkeypatch.setattr(FxcSubgraph, "compile", spy)
    return threads


def test_torch_compile_starts_the_build_before_the_first_call(monkeypatch):
    """The backend starts building the partition for the traced shapes on a thread (its LLVM parts compile while
    Dynamo builds its guards); the first call waits for that module and builds nothing itself."""
    import torch
    threads = _build_threads(monkeypatch)
    net, x = _early_net(), torch.randn(2, 3, 10, 9)
    f = torch.compile(net, backend="fxc")
    with torch.no_grad():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    assert threads == ["fxc-early-build"]


def test_a_failed_early_build_leaves_the_first_call_to_build(monkeypatch):
    import torch

    from fxc.capture.torch.partition import FxcSubgraph
    threads = _build_threads(monkeypatch)
    spied = FxcSubgraph.compile

    def fails_on_fake_tensors(self, args):
        if any(isinstance(a, torch._subclasses.FakeTensor) for a in args):
            threads.append("failed")
            raise RuntimeError("boom")
        return spied(self, args)
    monkeypatch.setattr(FxcSubgraph, "compile", fails_on_fake_tensors)
    net, x = _early_net(), torch.randn(1, 3, 8, 8)
    f = torch.compile(net, backend="fxc")
    with torch.no_grad():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    assert threads == ["failed", "MainThread"]


def test_symbolic_shapes_build_at_the_first_call(monkeypatch):
    import torch
    threads = _build_threads(monkeypatch)
    net = _early_net()
    f = torch.compile(net, backend="fxc", dynamic=True)
    with torch.no_grad():
        for w in (9, 12):
            x = torch.randn(1, 3, 10, w)
            torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    assert threads and set(threads) == {"MainThread"}


def test_a_group_and_the_same_group_with_a_residual_add_share_one_kernel(monkeypatch):
    """conv(+bias, relu) and conv(+bias + residual, relu) of one shape compile once: the plain call passes a null
    residual (lowering/optional.py), the kernel skips its loads then. Both results match numpy, as a Winograd conv
    and as a direct one."""
    import torch
    import torch.nn.functional as F

    from fxc.relay_like.builder import Builder
    from tests.helpers import assert_close_np
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    for c in (32, 8):           # 32 channels: Winograd; 8: the direct conv
        g = Builder().graph
        x, r = g.input((1, c, 12, 12), "float32"), g.input((1, c, 12, 12), "float32")
        w1, w2 = g.input((c, c, 3, 3), "float32"), g.input((c, c, 3, 3), "float32")
        b = g.input((c, 1, 1), "float32")

        def conv(v, w):
            padded = g.call1("pad", [v], pad=(1,) * 4, value=0.0, mode="constant")
            return g.call1("add", [g.call1("conv2d", [padded, w]), b])
        y1 = g.call1("relu", [conv(x, w1)])
        y2 = g.call1("relu", [g.call1("add", [conv(y1, w2), r])])
        g.outputs = [y1, y2]
        m = fb.build(g)
        names = [line.split(":")[0] for line in m.kernels if "conv2d" in line]
        assert len(names) == 2 and names[0] == names[1], m.kernels
        assert "store ptr null" in m.source and "icmp ne ptr" in m.source
        rng = np.random.default_rng(c)
        arrays = [rng.standard_normal(v.shape).astype(np.float32) for v in (x, r, w1, w2, b)]
        t = [torch.from_numpy(a) for a in arrays]
        e1 = torch.relu(F.conv2d(t[0], t[2], padding=1) + t[4])
        e2 = torch.relu(F.conv2d(e1, t[3], padding=1) + t[4] + t[1])
        got = m(*arrays)
        assert_close_np(got[0], e1.numpy())
        assert_close_np(got[1], e2.numpy())


def test_optional_input_only_where_the_input_is_a_term_of_a_stored_sum():
    from fxc.lowering.loop_ir import Buffer, For, IfThen, Kernel, LetStmt, Store
    from fxc.lowering.optional import optional_input
    from fxc.symbolic.expr import Const, Load, Var
    out, a, r = Buffer("out0", "float32", 8), Buffer("in0", "float32", 8), Buffer("in1", "float32", 8)
    i, t = Var("i"), Var("t")
    summed = Kernel("k", [out, a, r], For(i, 8, Store(out, i, Load(a, i) + Load(r, i))))
    k = optional_input(summed, r)
    assert isinstance(k.body.body, IfThen) and k.body.body.orelse.value is Load(a, i)
    scaled = Kernel("k", [out, a, r], For(i, 8, Store(out, i, Load(a, i) * Load(r, i))))
    assert optional_input(scaled, r) is None                       # not a term of a sum
    let = Kernel("k", [out, a, r], For(i, 8, LetStmt(t, Load(r, i), Store(out, i, Load(a, i) + Const(1.0, "float32")))))
    assert optional_input(let, r) is None                          # read outside a stored value
    assert optional_input(summed, a) is not None and optional_input(Kernel("k", [out, a, r], summed.body), out) is None


def test_the_runtime_object_built_at_install_is_used(monkeypatch, tmp_path):
    """scripts/setup.sh builds the thread-pool runtime's object file beside its source; a build in a fresh cache
    links that one instead of running gcc on it, and builds its own into the cache when there is none."""
    monkeypatch.setattr(llvm, "PREBUILT", tmp_path / "prebuilt")
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path / "cache"))
    llvm.prebuild_runtime()
    built = list((tmp_path / "prebuilt").glob("cpu_parallel-*.o"))
    assert len(built) == 1 and built[0].stat().st_size > 1000

    def no_gcc(*a, **k):
        raise AssertionError("gcc ran")
    with monkeypatch.context() as m:
        m.setattr(llvm, "_run", no_gcc)
        assert llvm._runtime_object() == built[0]
    built[0].unlink()
    own = llvm._runtime_object()
    assert own.parent == tmp_path / "cache" and own.name == built[0].name and own.exists()


def test_build_starts_each_kernel_part_as_it_is_rendered(tmp_path, monkeypatch, workers, per_kernel):
    # a build hands each kernel's part to the compile queue as soon as the kernel is rendered (the workers compile
    # it while the next kernels are lowered); the module's split at the end gives the very same parts, so each
    # compiles once, and the library runs
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    added, split, compiled = [], [], []
    real_add, real_split = llvm.CompileQueue.add, llvm.split_module
    monkeypatch.setattr(llvm.CompileQueue, "add",
                        lambda q, key, *a: added.append((key, q.closed)) or real_add(q, key, *a))
    monkeypatch.setattr(llvm, "split_module", lambda ir: split.append(real_split(ir)) or split[-1])
    here = llvm._compile_part
    monkeypatch.setattr(llvm, "_compile_part", lambda text, *a: compiled.append(text) or here(text, *a))
    m = fb.build(_graph(True))
    kernel_keys = {llvm.part_key(name, text) for name, text in split[0] if name != "entry"}
    early = {key for key, closed in added[:len(kernel_keys)]}
    assert len(kernel_keys) == 2 and early == kernel_keys and not any(closed for _, closed in added[:2])
    assert len(workers) + len(compiled) == len(split[0])           # every part once: the two kernels, the entry
    x = np.random.default_rng(1).standard_normal((4, 40)).astype(np.float32)
    a, b = m(x)
    np.testing.assert_allclose(a, np.exp(x).max(1), rtol=1e-5)
    np.testing.assert_allclose(b, (np.tanh(x) * 3).sum(1), rtol=1e-5)


def test_failed_build_closes_its_compile_queue(monkeypatch, workers):
    # a build that fails after its first kernel leaves no thread waiting for parts and restores the GIL's switch
    # interval it lowered while the workers were fed
    import sys
    import threading
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    interval = sys.getswitchinterval()
    real, calls = lower_cpu.group_kernel, []

    def second_fails(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return real(*a, **k)
    monkeypatch.setattr(lower_cpu, "group_kernel", second_fails)
    with pytest.raises(RuntimeError, match="boom"):
        fb.build(_graph(True))
    assert sys.getswitchinterval() == interval
    for t in threading.enumerate():
        if t.name.startswith("fxc-compile"):
            t.join(timeout=10)
            assert not t.is_alive()


def test_compile_queue_raises_a_bad_parts_error(tmp_path, monkeypatch, workers, per_kernel):
    from fxc.errors import CompileError
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    good = llvm.split_module(_module([("k0_a", 0, 2)]))[1]
    bad = (good[0], good[1].replace("@llvm.maximum.f32(float %x, float 0.0)", "@llvm.maximum.f32(float %x, i32 0)"))
    q = llvm.CompileQueue().start()
    for name, text in (good, bad):
        q.add(llvm.part_key(name, text), name, text, True)
    with pytest.raises(CompileError, match="invalid"):
        q.finish()
    assert q.closed and not q.running and not q.started     # finished: the workers' feeding threads are done
