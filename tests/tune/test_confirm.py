"""The confirmation step (fxc/tuning/confirm.py): each improved group's best config measured inside the whole model
against the default; a config that makes the whole model slower is left at its default, the others kept; one
confirmation record per group, which compiles apply before a faster unconfirmed record; a short fxc.tune confirms by
itself."""
import random

import pytest
import torch

import fxc
from fxc.tuning.confirm import confirm
from fxc.tuning.frontends import graph_of
from fxc.tuning.log import append, best_records, distil, make_record, read
from fxc.tuning.measure import MeasureParams
from fxc.tuning.scheduler import TaskState
from fxc.tuning.tasks import extract_tasks
from fxc.tuning.tuner import _measurer
from fxc.tuning.workload import target_key
from tests.tune.models import small


def test_compiles_apply_the_confirmation_first(tmp_path):
    a = tmp_path / "a.jsonl"
    append(a, make_record("w", "t", {"k": 1}, [1.0], None))
    append(a, make_record("w", "t", {"k": 2}, [0.5], None))
    append(a, make_record("w", "t", {}, [0.9], None, model={"default": [3.0], "tuned": [3.0]}))    # confirmed
    append(a, make_record("w", "t", {"k": 3}, [0.1], None))      # faster, found later, not confirmed
    append(a, make_record("v", "t", {"k": 4}, [0.2], None))
    best = best_records(read(a), "t")
    assert best["w"]["config"] == {} and best["w"]["confirmed"] and best["v"]["config"] == {"k": 4}
    assert distil([a], tmp_path / "d.jsonl") == (5, 3)
    assert best_records(read(tmp_path / "d.jsonl"), "t")["w"]["config"] == {}


@pytest.fixture
def improved(monkeypatch):
    """The small model's tunable groups, each with a valid non-default config said to beat its default alone."""
    m, x = small()
    graph = graph_of(m, x)
    target, tasks = extract_tasks(graph, "llvm")
    rng = random.Random(5)
    states = []
    for t in tasks:
        if t.tunable and not t.graph_level and not t.prepack:
            s = TaskState(t, default_cost=2e-4, best_cost=1e-4)
            s.best_config = next(c for c in iter(lambda: t.space.sample(rng), None) if c)
            states.append(s)
    assert len(states) >= 2
    return m, x, graph, target, states


def test_a_config_slower_in_the_model_stays_at_its_default(improved, tmp_path, monkeypatch):
    m, x, graph, target, states = improved
    slow = states[-1]
    monkeypatch.setenv("FXC_TEST_SLOW_WORKLOAD", slow.task.key)
    tkey, log = target_key(target), tmp_path / "log.jsonl"
    params = MeasureParams(repeat=3, min_repeat_ms=2)
    measurer, close = _measurer(None, target, tkey, params, "tests.tune.faulty:run_slow_in_model")
    try:
        result = confirm(graph, states, measurer, log, tkey, target)
    finally:
        close()
    assert not result.errors, result.errors
    assert slow.task.desc in result.dropped and len(result.kept) + len(result.dropped) == len(states), result
    assert slow.best_config == {} and 0 < result.tuned_s < float("inf")
    records = read(log)
    assert len(records) == len(states) and all(r["confirmed"] for r in records)
    assert {r["workload"]: r["config"] for r in records}[slow.task.key] == {}
    c = fxc.from_torch(m, x, tuning_log=str(log))
    torch.testing.assert_close(c(*x), m(*x), rtol=1e-4, atol=1e-5)
    lines = [str(k) for k in c.module.kernels]
    assert any("[tuned: defaults measured best]" in k for k in lines), lines


def test_tune_confirms_in_the_whole_model(tmp_path):
    m, x = small()
    log = tmp_path / "log.jsonl"
    r = fxc.tune(m, x, target="llvm", trials=12, log=log, batch=4, progress=False,
                 params=MeasureParams(repeat=2, min_repeat_ms=2))
    confirmed = [rec for rec in read(log) if rec.get("confirmed")]
    assert r.confirmation is not None and len(confirmed) == len(r.confirmation.kept) + len(r.confirmation.dropped)
    assert "confirmation" in str(r)
    c = fxc.from_torch(m, x, tuning_log=str(log))
    torch.testing.assert_close(c(*x), m(*x), rtol=1e-4, atol=1e-5)
