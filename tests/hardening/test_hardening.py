"""Hardened inputs: whatever a compiled callable is given, it recompiles (through Dynamo's guards) or raises an
fxc.errors exception naming the argument and expected vs actual; never a crash or a silently wrong result."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fxc
from fxc.errors import FxcError, InputError

pytestmark = pytest.mark.all_targets       # every target: these cases must hold on each (tests/targets.py)

NAN, INF = float("nan"), float("inf")


def compiled(fn, target="llvm"):
    return torch.compile(fn, backend="fxc", options={"target": target})


def same(actual, expected):
    torch.testing.assert_close(actual, expected, equal_nan=True)


# -- torch.compile: anything different recompiles through the guards -----------------------------------
def test_wrong_dtype_and_rank_recompile(target):
    def f(x, y):
        return torch.relu(x) * 2 + y.sum(-1, keepdim=True)
    c = compiled(f, target)
    for x, y in [(torch.randn(3, 4), torch.randn(3, 5)),
                 (torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)),
                 (torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (3, 5))),
                 (torch.randn(2, 3, 4), torch.randn(2, 3, 5)),      # another rank
                 (torch.randn(4), torch.randn(7)),
                 (torch.randn(3, 4), torch.randn(3, 5))]:            # back to the first signature
        same(c(x, y), f(x, y))


def test_non_contiguous_and_offset_inputs(target):
    def f(x, y):
        return torch.tanh(x) + y
    c = compiled(f, target)
    base = torch.randn(6, 8)
    for x, y in [(base.t(), torch.randn(8, 6)), (base[1:, ::2], base[:5, 1::2]),
                 (torch.randn(1, 6).expand(8, 6), base.t()), (base[2:5], base[3:6])]:
        same(c(x, y), f(x, y))


@pytest.mark.parametrize("case", ["relu", "reduce", "softmax", "matmul_k0", "matmul_n0", "cat", "conv_batch0",
                                  "layer_norm"])
def test_zero_size_dims(case, target):
    fns = {"relu": (lambda x: torch.relu(x) + 1, (torch.randn(0, 3),)),
           "reduce": (lambda x: (x.sum(1), x.amax(0), x.mean(1)), (torch.randn(4, 0),)),
           "softmax": (lambda x: torch.softmax(x, 0), (torch.randn(0, 5),)),
           "matmul_k0": (lambda a, b: a @ b, (torch.randn(3, 0), torch.randn(0, 4))),
           "matmul_n0": (lambda a, b: a @ b + 1, (torch.randn(3, 4), torch.randn(4, 0))),
           "cat": (lambda a, b: torch.cat([a, b], 0) * 2, (torch.randn(0, 3), torch.randn(2, 3))),
           "conv_batch0": (lambda x, w: F.conv2d(x, w), (torch.randn(0, 2, 5, 5), torch.randn(3, 2, 3, 3))),
           "layer_norm": (lambda x: F.layer_norm(x, (4,)), (torch.randn(0, 4),))}
    fn, args = fns[case]
    try:
        expected = fn(*args)
    except Exception:   # eager rejects it: the compiled callable must raise too
        with pytest.raises(Exception):
            compiled(fn, target)(*args)
        return
    same(compiled(fn, target)(*args), expected)


def test_sizes_past_32_bit_indexing(target):
    """A 65539 x 32769 broadcast (more than 2**31 elements) reduced without materialising it."""
    def f(x):
        return x.expand(2 ** 16 + 3, 2 ** 15 + 1).amax(0) + 1
    x = torch.arange(2 ** 15 + 1, dtype=torch.int64).reshape(1, -1)
    assert torch.equal(compiled(f, target)(x), f(x))


@pytest.mark.parametrize("name", ["relu", "maximum", "amax", "max_dim", "argmax", "clamp", "softmax", "log_softmax",
                                  "max_pool2d", "sign", "floor_divide", "remainder", "div_by_zero", "where", "sum",
                                  "layer_norm", "leaky_relu", "hardtanh", "isinf"])
def test_nan_inf_values(name, target):
    fns = {
        "relu": torch.relu, "maximum": lambda x: torch.maximum(x, torch.zeros_like(x)),
        "amax": lambda x: (x.amax(1), x.amin(0)), "max_dim": lambda x: x.max(1), "argmax": lambda x: x.argmax(1),
        "clamp": lambda x: x.clamp(-0.5, 0.5), "softmax": lambda x: torch.softmax(x, 1),
        "log_softmax": lambda x: torch.log_softmax(x, 0), "max_pool2d": lambda x: F.max_pool2d(x[None], 2, 1),
        "sign": torch.sign, "floor_divide": lambda x: (torch.floor_divide(x, 0.1), torch.floor_divide(x, -0.7)),
        "remainder": lambda x: (torch.remainder(x, 0.1), torch.fmod(x, -0.7)),
        "div_by_zero": lambda x: x / torch.zeros_like(x), "where": lambda x: torch.where(x > 0, x, -x),
        "sum": lambda x: x.sum(0), "layer_norm": lambda x: F.layer_norm(x, (4,)),
        "leaky_relu": F.leaky_relu, "hardtanh": F.hardtanh, "isinf": lambda x: (torch.isinf(x), torch.isnan(x)),
    }
    x = torch.tensor([[NAN, 1.0, -INF, INF], [2.0, NAN, 0.0, -1.0], [1.0, 2.0, 3.0, 4.0], [-0.0, 0.3, 7.0, -7.5]])
    fn = fns[name]
    same(compiled(fn, target)(x.clone()), fn(x.clone()))


def test_floor_divide_is_exact(target):
    """1.0 // 0.1 is 9.0 (0.1 is slightly more than a tenth); floor(1.0 / 0.1) would say 10."""
    def f(a, b):
        return torch.floor_divide(a, b)
    a = torch.tensor([1.0, -1.0, 7.0, 0.3, 5.0, -7.5, 7.5, 2.0])
    b = torch.tensor([0.1, 0.1, 0.7, 0.1, 0.0, 2.0, -2.0, INF])
    same(compiled(f, target)(a, b), f(a, b))


# -- aliasing, overlapping and in-place mutation ------------------------------------------------------
def test_aliased_and_overlapping_outputs(target):
    def f(x):
        y = x * 2
        return y, y, y.view(-1), y[1:], x
    x = torch.randn(3, 4)
    exp, act = f(x.clone()), compiled(f, target)(x.clone())
    for a, e in zip(act, exp):
        same(a, e)
    act[0].add_(1)   # outputs that alias in eager alias in the compiled result too
    exp[0].add_(1)
    for a, e in zip(act, exp):
        same(a, e)


def test_overlapping_inputs(target):
    def f(a, b):
        return a * 2 + b
    base = torch.randn(10)
    c = compiled(f, target)
    same(c(base[1:], base[:-1]), f(base[1:], base[:-1]))
    same(c(base, base), f(base, base))


def test_inputs_mutated_in_place(target):
    def f(x, y):
        x.add_(1)
        y[0].mul_(3)
        return x * y
    x, y = torch.randn(3, 4), torch.randn(2, 4)
    xe, ye = x[:2].clone(), y.clone()
    xc, yc = x[:2].clone(), y.clone()
    same(compiled(f, target)(xc, yc), f(xe, ye))
    same(xc, xe)
    same(yc, ye)


def test_mutation_of_aliased_input(target):
    def f(x, v):
        v.mul_(2)       # v is a view of x: x changes too
        return x + 1
    base = torch.randn(4, 4)
    be, bc = base.clone(), base.clone()
    same(compiled(f, target)(bc, bc[1]), f(be, be[1]))
    same(bc, be)


# -- from_torch / runtime Module: a clear InputError ----------------------------------------------------
class _Tiny(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


@pytest.fixture(scope="module")
def tiny():
    return fxc.from_torch(_Tiny(), (torch.randn(2, 3),))


@pytest.mark.parametrize("bad, words", [
    (lambda: (torch.randn(2, 3, dtype=torch.float64),), ["dtype", "float32", "float64"]),
    (lambda: (torch.randn(2, 3, 1),), ["shape", "[2, 3]", "[2, 3, 1]"]),
    (lambda: (torch.randn(3, 2),), ["shape", "[2, 3]", "[3, 2]"]),
    (lambda: (torch.randn(0, 3),), ["shape", "[0, 3]"]),
    (lambda: (torch.randint(0, 3, (2, 3)),), ["dtype", "int64"]),
    (lambda: (torch.randn(2, 3, device="meta"),), ["meta"]),
    (lambda: (), ["expected 1 input"]),
    (lambda: (torch.randn(2, 3), torch.randn(2, 3)), ["expected 1 input", "got 2"]),
    (lambda: (np.zeros((2, 3), np.int32),), ["dtype", "int32"]),
])
def test_from_torch_rejects_bad_inputs(tiny, bad, words):
    with pytest.raises(InputError) as e:
        tiny(*bad())
    msg = str(e.value)
    name = tiny.inputs[0].name
    for w in words:
        assert w in msg, msg
    if "input" not in words[0]:
        assert repr(name) in msg or name in msg, msg


def test_from_torch_accepts_equivalent_layouts(tiny):
    x = torch.randn(3, 2).t()            # non-contiguous, right shape
    same(tiny(x), torch.relu(x) + 1)
    np.testing.assert_allclose(tiny(np.asfortranarray(x.numpy())), (torch.relu(x) + 1).numpy())


def test_errors_are_fxc_errors():
    assert issubclass(InputError, FxcError)


@pytest.mark.parametrize("k", range(8))
def test_reductions_of_0d_tensors_over_dim_0(k, target):
    """A 0-d tensor reduced over dim 0 / -1 (OpInfo samples did this; it used to fail to compile)."""
    fn = [lambda x: torch.max(x, 0), lambda x: torch.min(x, -1, keepdim=True), lambda x: x.sum(0),
          lambda x: x.amax(-1, keepdim=True), lambda x: x.argmax(0), lambda x: x.mean(0),
          lambda x: torch.aminmax(x, dim=0), lambda x: x.argmin(-1, keepdim=True)][k]
    x = torch.tensor(3.0)
    same(compiled(fn, target)(x), fn(x))
    from fxc.capture.torch.explain import explain
    assert not explain(fn, x).failures


def test_lazy_negation_views(target):
    """torch._neg_view: is_neg() tensors whose raw memory holds -value (resolved before the kernel reads it)."""
    def f(x, y):
        return torch.relu(x) + y
    x, y = torch.randn(5), torch.randn(5)
    xn = torch._neg_view(x)
    assert xn.is_neg()
    same(compiled(f, target)(xn, y), f(xn, y))
    m = fxc.from_torch(_Tiny(), (torch.randn(5),))
    same(m(xn), torch.relu(xn) + 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.complex64, torch.int16])
def test_other_dtypes_are_right_compiled_or_not(dtype, target):
    """float16/bfloat16 compute in float32 op by op, rounded as eager rounds; int16 is a storage dtype (its
    arithmetic runs eagerly), complex64 compiles as real pairs, and exp of a complex value has no fxc op (eager):
    each matches eager."""
    def f(y):
        return y * 2 + 1
    y = torch.randn(5).to(dtype)
    same(compiled(f, target)(y), f(y))
    if dtype.is_complex:
        same(compiled(torch.exp, target)(y), torch.exp(y))


@pytest.mark.parametrize("shapes, dim", [([(0, 1, 0), (0, 1, 0)], 0), ([(2, 0, 3), (2, 0, 3)], 1),
                                         ([(0, 2), (0, 2)], -1)])
def test_stack_and_cat_of_empty_tensors_compile(shapes, dim, target):
    """cat/stack whose inputs are all empty along the joined dim (OpInfo's stack sample failed to compile)."""
    from fxc.capture.torch.explain import explain
    ts = [torch.randn(s) for s in shapes]
    for fn in (lambda *t: torch.stack(t, dim), lambda *t: torch.cat(t, dim) * 2):
        same(compiled(fn, target)(*ts), fn(*ts))
        assert not explain(fn, *ts).failures


@pytest.mark.parametrize("fn", [lambda a, b: torch.div(a, b, rounding_mode="floor") + 1,
                                lambda a, b: torch.remainder(a, b) * 2,
                                lambda a, b: torch.fmod(a, b) - 1])
def test_integer_division_by_zero_raises_as_eager(fn, target):
    a, b = torch.arange(6), torch.tensor([1, 2, 0, 1, 1, 1])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, b)
    compiled = torch.compile(fn, backend="fxc", options={"target": target})
    with pytest.raises(fxc.errors.ExecutionError, match="division by zero"):
        compiled(a, b)
    ok = torch.tensor([1, 2, 3, 1, 1, 1])          # the flag does not stick to the next call
    torch.testing.assert_close(compiled(a, ok), fn(a, ok))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("src", [torch.float32, torch.float64])
def test_out_of_range_float_to_int_casts_as_eager(dtype, src, target):
    """NaN, inf and out-of-range floats convert as PyTorch does on x86 (truncate to int32, or int64; the
    'integer indefinite' MIN when it does not fit; narrower types wrap), not saturated."""
    x = torch.tensor([300.0, -1.0, -129.0, 200.7, -0.9, 1e10, -1e10, 3e9, 2.0 ** 31, -2.0 ** 31, 2.0 ** 63,
                      float("nan"), float("inf"), -float("inf")], dtype=src)
    f = lambda t: (t * 1.0).to(dtype)
    torch.testing.assert_close(compiled(f, target)(x), f(x), rtol=0, atol=0)


@pytest.mark.parametrize("openmp", ["0", "1", ""])
def test_worker_wake_ahead_of_calls_keeps_results_right(monkeypatch, openmp):
    """Module.wake (the runtime's fxc_wake) wakes the sleeping workers ahead of a call: woken with no call
    following, they go back to sleep; woken twice, or while a call runs from another thread, results stay right.
    With FXC_OPENMP=1 the loops run on OpenMP's team instead, where wake does nothing and two callers each get a
    team; by default (2) a call takes whichever is awake, and a second calling thread takes the pool."""
    import threading
    import time
    monkeypatch.setenv("FXC_NUM_THREADS", "2")
    monkeypatch.setenv("FXC_OPENMP", openmp)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 16, 1)).eval()
    x = torch.randn(2, 8, 20, 20)
    with torch.no_grad():
        compiled = fxc.from_torch(net, (x,))
        ref = net(x)
        module = compiled.module
        assert module._lib.wake is not None and module._lib.lib.fxc_uses_openmp() == int(openmp or 2)
        for pause in (0.0, 0.01, 0.0):           # 10 ms: past both spins (the workers are asleep again)
            module.wake()
            module.wake()
            time.sleep(pause)
            torch.testing.assert_close(compiled(x), ref, rtol=1e-4, atol=1e-5)
        errors = []

        def calls():
            for _ in range(20):
                if not torch.allclose(compiled(x), ref, rtol=1e-4, atol=1e-5):
                    errors.append("wrong")
        t = threading.Thread(target=calls)
        t.start()
        for _ in range(200):
            module.wake()
        t.join(timeout=60)
        assert not t.is_alive() and not errors


def test_a_call_right_after_a_pytorch_op_runs_on_its_openmp_team(monkeypatch):
    """By default a module's parallel loops run on PyTorch's OpenMP team while its threads are awake (they spin
    for some ms after each parallel op of PyTorch's; fxc's workers would share the cores with them) and on fxc's
    pool once they sleep. Results are the same either way."""
    import time
    monkeypatch.setenv("FXC_NUM_THREADS", "2")
    monkeypatch.delenv("FXC_OPENMP", raising=False)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 16, 1)).eval()
    x = torch.randn(2, 8, 20, 20)
    a = torch.randn(384, 384)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            compiled = fxc.from_torch(net, (x,))
            ref = net(x)
            lib = compiled.module._lib.lib
            assert lib.fxc_uses_openmp() == 2
            compiled(x)                              # the first loop finds the team (it runs on it)
            seen = set()
            for i in range(12):
                if i >= 3 and ("after an op", 1) in seen:
                    break
                time.sleep(0.5)                      # the team's threads are asleep by now
                torch.testing.assert_close(compiled(x), ref, rtol=1e-4, atol=1e-5)
                seen.add(("idle", lib.fxc_last_loop_on_team()))
                for _ in range(4):
                    a = (a @ a).tanh_()              # PyTorch's parallel ops: its team spins afterwards
                torch.testing.assert_close(compiled(x), ref, rtol=1e-4, atol=1e-5)
                seen.add(("after an op", lib.fxc_last_loop_on_team()))
    finally:
        torch.set_num_threads(threads)
    # idle: always fxc's pool; right after PyTorch's ops: the team, at least once in up to twelve tries (on a
    # loaded host, e.g. beside the other test worker, the team's threads may be descheduled and asleep before the call)
    assert ("idle", 1) not in seen and ("after an op", 1) in seen, seen


FORK_CHILD = """
import os, sys, torch, fxc
net = torch.nn.Sequential(torch.nn.Conv2d(8, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 16, 1)).eval()
x = torch.randn(2, 8, 20, 20)
with torch.no_grad():
    compiled = fxc.from_torch(net, (x,))
    ref = net(x)
    assert torch.allclose(compiled(x), ref, rtol=1e-4, atol=1e-5)
    lib = compiled.module._lib.lib
    assert lib.fxc_uses_openmp() == 1
    pid = os.fork()
    if pid == 0:
        ok = torch.allclose(compiled(x), ref, rtol=1e-4, atol=1e-5) and lib.fxc_uses_openmp() == 0
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    print("child", status)
"""


def test_a_forked_child_runs_kernels_on_fxcs_pool(tmp_path):
    """On OpenMP's team (FXC_OPENMP=1, or a training step's graphs), whose threads a forked child does not have
    (libgomp then hangs at the first parallel loop, as PyTorch's own ops do), the child turns to fxc's pool, which
    restarts after fork."""
    import subprocess
    import sys
    env = dict(__import__("os").environ, FXC_CACHE_DIR=str(tmp_path), FXC_NUM_THREADS="2", FXC_OPENMP="1")
    p = subprocess.run([sys.executable, "-c", FORK_CHILD], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("child 0"), p.stdout + p.stderr
