"""The schedule registry (fxc/lowering/schedules): one table per target family keyed by op kind, the family's default
for a kind without a schedule, the layout rules the graph passes ask, and the layering it keeps (op files hold
compute definitions only; passes reach schedules through the registry; the vector width is the target's)."""
import re
from pathlib import Path

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.errors import TargetError
from fxc.lowering.schedules import family_of, lookup, rule
from fxc.relay_like.builder import Builder
from fxc.target import Target
from tests.helpers import assert_close_np

FXC = Path(__file__).resolve().parents[2] / "fxc"


def test_lookup_by_family_and_kind_with_a_default_per_family():
    from fxc.lowering.schedules import cpu, gpu
    from fxc.lowering.schedules.cpu.default import schedule_root
    from fxc.lowering.schedules.cpu.gemm import schedule_conv2d_packed, schedule_matmul_packed
    from fxc.lowering.schedules.cpu.winograd import schedule_conv2d_winograd
    assert lookup("cpu", "conv2d_packed") is schedule_conv2d_packed
    assert lookup("cpu", "matmul_packed") is schedule_matmul_packed
    assert lookup("cpu", "conv2d_winograd") is schedule_conv2d_winograd
    assert lookup("cpu") is lookup("cpu", "no_such_kind") is schedule_root
    assert lookup("cpu", "no_such_kind", default=False) is None
    assert lookup("gpu", "gemm") is gpu.SCHEDULES["gemm"] and lookup("gpu", "gemm") is not lookup("gpu")
    assert lookup("gpu", "no_such_kind") is gpu.SCHEDULES["compute"]
    assert set(cpu.SCHEDULES) >= {"root", "conv2d_packed", "matmul_packed", "depthwise_conv2d", "depthwise_blocked",
                                  "conv2d_winograd"}
    with pytest.raises(TargetError, match="no schedules for target family 'tpu'"):
        lookup("tpu", "gemm")


def test_family_of_a_target():
    assert family_of(Target.parse("llvm -mcpu=haswell")) == "cpu"
    assert family_of(Target.parse("opencl")) == "gpu"


def test_rules_read_the_targets_registers():
    """The register tile's accumulator budget the passes ask for: AVX-512's 32 registers but 4, AVX2's 16 but 4, in
    vectors of the target's own width."""
    acc = rule("cpu", "acc_vectors")
    assert acc(Target.parse("llvm -mcpu=skylake-avx512").caps) == 28
    assert acc(Target.parse("llvm -mcpu=haswell").caps) == 12
    assert rule("cpu", "conv1x1_as_gemm")(64, 32, 3136) and not rule("cpu", "conv1x1_as_gemm")(512, 64, 49)
    with pytest.raises(TargetError, match="no schedule rule 'tile_size'"):
        rule("cpu", "tile_size")


def _matmul_graph():
    b = Builder()
    a, w = b.graph.input((6, 33), "float32"), b.graph.input((33, 40), "float32")
    b.graph.outputs = list(b.graph.call("relu", list(b.graph.call("matmul", [a, w]))))
    return b.graph


def test_a_reduction_runs_the_schedule_its_kind_names_in_the_registry(monkeypatch):
    """The CPU build dispatches a matmul_packed reduction through the registry's table: the entry there is what
    runs (counted here), and the result matches numpy."""
    from fxc.lowering.schedules import cpu
    calls = []
    real = cpu.SCHEDULES["matmul_packed"]

    def counted(*args):
        calls.append(args[1].attrs.get("schedule"))
        return real(*args)
    monkeypatch.setitem(cpu.SCHEDULES, "matmul_packed", counted)
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((6, 33)).astype(np.float32), rng.standard_normal((33, 40)).astype(np.float32)
    got = build(_matmul_graph())(a, w)
    assert calls == ["matmul_packed"]
    assert_close_np(got, np.maximum(a.astype(np.float64) @ w.astype(np.float64), 0).astype(np.float32))


def test_op_files_hold_compute_definitions_only():
    """No op file imports a schedule or names a vector width; graph passes reach schedules through the registry
    only; LANES is defined nowhere (the vector width is the target's Caps.lanes)."""
    for f in sorted((FXC / "ops").glob("*.py")):
        text = f.read_text()
        assert not re.search(r"^\s*from \.\.lowering\.schedules", text, re.M), f"{f.name} imports a schedule"
        assert "LANES" not in text, f"{f.name} names LANES"
    for f in sorted((FXC / "relay_like").rglob("*.py")):
        assert not re.search(r"lowering\.schedules\.(cpu|gpu)", f.read_text()), f"{f.name} imports a family module"
    for f in sorted(FXC.rglob("*.py")):
        assert not re.search(r"^LANES\s*=", f.read_text(), re.M), f"{f.relative_to(FXC)} defines LANES"


def test_ops_do_not_import_the_graph_ir_package():
    """No package cycle: fxc.relay_like (the graph IR and its passes) imports fxc.ops, so no op file imports
    fxc.relay_like (TensorType lives in fxc/types.py); checked in a fresh interpreter too (ops first)."""
    import subprocess
    import sys
    for f in sorted((FXC / "ops").glob("*.py")):
        assert not re.search(r"^\s*(from|import) \.\.relay_like", f.read_text(), re.M), f"{f.name} imports relay_like"
    code = "import sys, fxc.ops; print(any(m.startswith('fxc.relay_like') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False", "importing fxc.ops loads fxc.relay_like"
