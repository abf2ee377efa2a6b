"""The per-kernel profile (profile=True / FXC_PROFILE=1): every kernel of the plan is timed, the table names
the kernels and their groups, times are positive and FLOP rates appear where a kernel has a FLOP count; an
unprofiled module has no timers (and says how to get them)."""
import numpy as np
import pytest
import torch

import fxc
from fxc.driver.build import build
from fxc.errors import FxcError
from fxc.ops.registry import all_ops
from fxc.relay_like.graph import Graph

all_ops()


def small_graph():
    g = Graph()
    a, b = g.input((32, 48), "float32", "a"), g.input((48, 40), "float32", "b")
    y = g.call1("relu", [g.call1("matmul", [a, b])])
    g.outputs = [g.call1("sum", [y], axes=(1,), keepdim=False)]
    return g


def test_profile_table_names_kernels_with_positive_times():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 48), np.float32), rng.standard_normal((48, 40), np.float32)
    m = build(small_graph(), profile=True)
    for _ in range(5):
        out = m(a, b)
    np.testing.assert_allclose(out, np.maximum(a @ b, 0).sum(1), rtol=1e-4, atol=1e-4)
    rows = m.profile()
    assert [r["kernel"] for r in rows] == [line.split(":")[0] for line in m.kernels]
    main = [r for r in rows if "prepack" not in r["group"]]
    assert main and all(r["calls"] == 5 and r["total_ms"] > 0 and r["mean_us"] > 0 for r in main)
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-6
    mm = next(r for r in rows if "matmul" in r["group"])
    assert mm["gflops"] is not None and mm["gflops"] > 0
    table = m.profile_table(reset=True)
    for r in rows:
        assert r["kernel"] in table
    assert "GFLOP/s" in table and "matmul" in table
    assert all(r["calls"] == 0 for r in m.profile())      # reset


def test_unprofiled_module_has_no_timers():
    m = build(small_graph())
    with pytest.raises(FxcError, match="profile=True"):
        m.profile()
    assert "fxc_profile_now" not in m.source       # no timer calls in the default build


def test_profile_option_through_from_torch():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)).eval()
    x = torch.randn(1, 3, 16, 16)
    compiled = fxc.from_torch(model, (x,), profile=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    rows = compiled.module.profile()
    assert any("conv2d" in r["group"] and r["calls"] == 1 and r["total_ms"] > 0 for r in rows)


def _check_spread(rows, runs):
    for r in rows:
        if r["calls"]:
            assert r["min_us"] is not None and 0 < r["min_us"] <= r["median_us"], r
            assert r["min_us"] <= r["mean_us"] * (1 + 1e-9), r      # the minimum is never above the mean
    assert sum(r["calls"] for r in rows) >= runs


@pytest.mark.parametrize("target", ["llvm", "opencl", "webgl"])
def test_profile_median_and_minimum(target):
    """A mean alone is no measure on a shared host: the table gives each kernel's median and minimum per call, and
    the header each run's (the samples are what each run added to the counters)."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((32, 48), np.float32), rng.standard_normal((48, 40), np.float32)
    m = build(small_graph(), target, profile=True)
    for _ in range(12):
        m(a, b)
    rows = m.profile()
    _check_spread(rows, 12)
    table = m.profile_table()
    assert "median us" in table and "min us" in table
    if target == "llvm":        # each kept run's time in kernels: median and minimum in the header
        head = table.splitlines()[0]
        mean, median, least = (float(head.split(w)[1].split()[0]) for w in ("mean ", "median ", "min "))
        assert 0 < least <= median and least <= mean * (1 + 1e-9), head
        kernels = [r for r in rows if r["calls"] == 12]
        assert abs(sum(r["total_ms"] for r in kernels) / 12 - mean) <= 5e-4 + 1e-3 * mean    # (printed to 1 us)
    m.profile(reset=True)
    assert all(r["median_us"] is None and r["calls"] == 0 for r in m.profile())
