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
