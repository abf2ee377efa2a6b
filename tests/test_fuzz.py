"""Random-graph differential fuzzing (fxc/testing/fuzz.py): a short fixed-seed run, the shrinker on a
deliberately broken op, and every saved reproducer in tests/regressions/."""
import dataclasses
import json
from pathlib import Path

import pytest

import fxc.ops.elementwise as elementwise
from fxc.lowering.expr import unary as un
from fxc.ops import registry
from fxc.testing import fuzz

REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.json"))


def test_fixed_seed_run(target):
    stats = fuzz.run(count=24, seed=0, target=target, save_dir=None, progress=lambda m: None, batch=8)
    assert stats["graphs"] == 24
    assert stats["wrong"] == 0 and stats["crashed"] == 0, stats["failures"]


def test_programs_are_deterministic_json():
    p = fuzz.generate(123)
    assert json.loads(json.dumps(p)) == p == fuzz.generate(123)
    assert p["steps"] and p["outputs"]


@pytest.fixture
def broken_tanh():
    op = registry.get_op("tanh")
    registry._REGISTRY["tanh"] = dataclasses.replace(op, compute=elementwise._map(lambda x: un("tanh", x * 1.1), "tanh"))
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
    """Every shrunk reproducer saved by the fuzzer (none yet: no failing program has been found) stays fixed."""
    for path in REGRESSIONS:
        case = json.loads(path.read_text())
        assert fuzz.check(case["program"], target) is None, f"{path.name}: {case['failure']}"


def test_fixed_seed_run_with_gradients(target):
    """Backward graphs compile too: gradients of a random weighting of the outputs match eager."""
    stats = fuzz.run(count=12, seed=1000, target=target, save_dir=None, progress=lambda m: None, batch=12, grad=True)
    assert stats["graphs"] == 12 and stats["wrong"] == 0 and stats["crashed"] == 0, stats["failures"]


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
    assert stats == {"graphs": 4, "wrong": 0, "crashed": 0, "failures": []}
    assert not list(tmp_path.glob(".fuzz_current*"))
