"""Random-graph differential fuzzing (fxc/testing/fuzz.py): a short fixed-seed run, the shrinker on a
deliberately broken op, every saved reproducer in tests/regressions/, a subgraph that could not compile counted as
a failure, and the graphs where fusion once made a group that lowering rejects (issue 27 item 6)."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fxc.ops.elementwise as elementwise
from fxc.capture.torch.recorder import recording
from fxc.lowering import te
from fxc.ops import registry
from fxc.relay_like.passes.fuse_ops import fuse_ops
from fxc.symbolic.expr import unary as un
from fxc.testing import fuzz

REGRESSIONS = sorted((Path(__file__).parents[1] / "regressions").glob("*.json"))


def test_fixed_seed_run(target):
    stats = fuzz.run(count=24, seed=0, target=target, save_dir=None, progress=lambda m: None, batch=8)
    assert stats["graphs"] == 24
    assert stats["wrong"] == 0 and stats["crashed"] == 0 and stats["uncompiled"] == 0, stats["failures"]


def test_programs_are_deterministic_json():
    p = fuzz.generate(123)
    assert json.loads(json.dumps(p)) == p == fuzz.generate(123)
    assert p["steps"] and p["outputs"]


@pytest.fixture
def broken_tanh():
    op = registry.get_op("tanh")
    broken = elementwise._map(lambda x: un("tanh", x * 1.1), "tanh")
    registry._REGISTRY["tanh"] = dataclasses.replace(op, compute=broken)
    yield
    registry._REGISTRY["tanh"] = op


def test_a_wrong_kernel_is_found_and_shrunk(broken_tanh, tmp_path, target):
    program = fuzz.generate(89)     # transpose -> hardswish -> clamp -> expand -> tanh
    assert "tanh" in [s["op"] for s in program["steps"]] and len(program["steps"]) >= 4
    failure = fuzz.check(program, target)
    assert failure and failure.startswith("wrong")
    small = fuzz.shrink(program, failure, target)
    assert [s["op"] for s in small["steps"]] == ["tanh"], small
    path = fuzz.save_reproducer(small, failure, tmp_path)
    assert fuzz.main(["--replay", str(path), "--target", target]) == 1


def test_saved_reproducers(target):
    """Every shrunk reproducer saved by the fuzzer stays fixed: right, and compiled (among them the 'uncompiled'
    ones of issue 27 item 6: a stand-alone op's result read twice by silu or hardswish)."""
    for path in REGRESSIONS:
        case = json.loads(path.read_text())
        assert fuzz.check(case["program"], target) is None, f"{path.name}: {case['failure']}"


def test_fixed_seed_run_with_gradients(target):
    """Backward graphs compile too: gradients of a random weighting of the outputs match eager."""
    stats = fuzz.run(count=12, seed=1000, target=target, save_dir=None, progress=lambda m: None, batch=12, grad=True)
    assert stats["graphs"] == 12 and not stats["wrong"] + stats["crashed"] + stats["uncompiled"], stats["failures"]


def test_float64_judge_forgives_rounding_only():
    """A float32 difference from eager passes only when eager is as far from the float64 answer."""
    import torch
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = torch.tensor([1.0, 2.0, 3.01])          # eager itself off by 1e-2 (ill-conditioned sum)
    assert fuzz.closer_than_eager(torch.tensor([1.0, 2.0, 2.995]), eager, ref, 1e-4)
    assert not fuzz.closer_than_eager(torch.tensor([1.0, 2.0, 3.5]), eager, ref, 1e-4)     # far worse
    exact = torch.tensor([1.0, 2.0, 3.0])                                                   # eager exact
    assert not fuzz.closer_than_eager(torch.tensor([1.0, 2.0, 3.001]), exact, ref, 1e-4)
    assert not fuzz.closer_than_eager(torch.tensor([1.0, float("nan"), 3.0]), eager, ref, 1e-4)


def test_sharded_run_adds_up(tmp_path):
    """--jobs: shards of consecutive seeds in subprocesses; their stats add up and no case file is left."""
    stats = fuzz.run_jobs(2, 4, 40, ["--save-dir", str(tmp_path), "--batch", "2"], progress=lambda m: None)
    assert stats == {"graphs": 4, "wrong": 0, "crashed": 0, "uncompiled": 0, "failures": []}
    assert not list(tmp_path.glob(".fuzz_current*"))


@pytest.fixture
def unlowerable_tanh():
    """tanh's compute replaced by one that lowering rejects: its subgraph cannot compile (and runs in eager)."""
    op = registry.get_op("tanh")

    def compute(x):
        raise registry.UnsupportedOpError("a deliberately broken tanh")
    registry._REGISTRY["tanh"] = dataclasses.replace(op, compute=compute)
    yield
    registry._REGISTRY["tanh"] = op


def test_a_subgraph_that_could_not_compile_is_a_failure(unlowerable_tanh, target):
    """Results stay right (that part runs in eager PyTorch), but the fuzzer counts the lost subgraph."""
    program = {"seed": 5, "inputs": [[3, 4]], "steps": [{"op": "tanh", "args": [0], "params": {}}], "outputs": [1]}
    failure = fuzz.check(program, target)
    assert failure and failure.startswith("uncompiled: subgraph") and "deliberately broken" in failure, failure


# -- fusion and lowering agree: an op that stands alone is never joined to another node (issue 27 item 6) ---------
EAGER_CASES = {
    # the case: max_pool2d's result read twice by hardswish, whose group joined the pool as its epilogue
    "max_pool2d-hardswish-cumsum": (lambda x: torch.cumsum(F.hardswish(F.max_pool2d(torch.erf(x), 2, 1)), -1),
                                    (4, 4, 4, 9)),
    "softmax-silu-sum": (lambda x: F.silu(torch.softmax(x, -1)).sum(-1), (3, 5, 7)),
    "softmax-times-self-cumsum": (lambda x: torch.cumsum(torch.softmax(x, 1) * torch.softmax(x, 1).sigmoid(), 1),
                                  (2, 6, 3)),
    "layer_norm-gelu-amax": (lambda x: F.gelu(F.layer_norm(x, (8,))).amax(-1), (4, 8)),
}


@pytest.mark.parametrize("case", list(EAGER_CASES))
def test_fused_groups_compile(case, target):
    """A stand-alone op's result read several times by elementwise ops, then by a scan or a reduction: every
    subgraph compiles (no "could not compile subgraph" note) and matches eager."""
    fn, shape = EAGER_CASES[case]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with recording() as rec:
        got = torch.compile(fn, backend="fxc", dynamic=False, options={"target": target})(x)
    assert not rec.failures and not rec.fallback_ops, str(rec)
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)


def test_every_loop_ir_op_stands_alone():
    """The rule both sides read (OpDef.stands_alone): an op whose compute is loop IR written whole (te.extern, which
    lowering cannot inline into another op's expression) stands alone, so fuse_ops never joins it to a node."""
    for op in registry.all_ops().values():
        if op.compute is None or op.samples is None:
            continue
        for ins, attrs in op.samples(np.random.default_rng(0)):
            res = op.compute(*[te.placeholder(a.shape, str(a.dtype), f"in{k}") for k, a in enumerate(ins)], **attrs)
            if any(t.extern is not None for t in (res if isinstance(res, (list, tuple)) else [res])):
                assert op.stands_alone, f"{op.name} computes loop IR (te.extern) but does not stand alone"


def test_fusion_keeps_a_stand_alone_op_alone():
    """The issue's graph: hardswish reads max_pool2d's result twice (x * clamp(x + 3, 0, 6) / 6), which made its
    group max_pool2d's epilogue (`_reread_epilogue`); max_pool2d stands alone, so it stays a group of its own."""
    from fxc.relay_like.builder import Builder
    b = Builder()
    x = b.graph.input((4, 4, 4, 9), "float32")
    p = b.call("max_pool2d", [b.call("erf", [x])], kernel=(2, 2), stride=(1, 1))
    h = b.call("mul", [p, b.call("clamp", [b.call("add", [p, 3.0])], lo=0.0, hi=6.0)])
    b.graph.outputs = [b.call("cumsum", [b.call("div", [h, 6.0])], dim=-1)]
    groups = fuse_ops(b.graph)
    assert [[n.op for n in gr.nodes] for gr in groups] == [["erf"], ["max_pool2d"], ["add", "clamp", "mul", "div"],
                                                           ["cumsum"]]
