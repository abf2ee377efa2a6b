"""Measurement: the check against the default schedule, and a batch in a persistent child whose candidates crash and
hang, each recorded against the candidate that caused it."""
import os
import random

import numpy as np
import pytest

from fxc.tuning.frontends import graph_of
from fxc.tuning.measure import Child, MeasureParams, _differs, measure
from fxc.tuning.tasks import extract_tasks
from fxc.tuning.workload import target_key
from tests.tune.models import small


def test_the_check_against_the_default():
    p = MeasureParams()
    ref = np.linspace(-50, 50, 1000).astype(np.float32)
    assert _differs(0, ref + 1e-3, ref, p) == ""            # a reordered sum's rounding at the output's scale
    assert "max |diff|" in _differs(0, ref + 1.0, ref, p)
    assert "shape" in _differs(0, ref[:-1], ref, p)
    bad = ref.copy()
    bad[3] = np.nan
    assert "non-finite" in _differs(0, bad, ref, p)
    assert "differs" in _differs(0, np.arange(4), np.arange(4)[::-1].copy(), p)


@pytest.fixture
def many_descriptors():
    """Descriptors held open past FD_SETSIZE (1024), as a long-lived process (a test worker, a notebook) may hold:
    the child's pipe then gets a number select() cannot watch."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    yield
    for fd in held:
        os.close(fd)


def test_crash_and_hang_in_a_persistent_child(many_descriptors):
    m, x = small()
    target, tasks = extract_tasks(graph_of(m, x), "llvm")
    task = next(t for t in tasks if t.tunable and not t.graph_level)
    child = Child()
    try:
        params = MeasureParams(repeat=2, min_repeat_ms=2, timeout_s=15)
        good = measure(task, str(target), target_key(target), [{}, task.space.sample(random.Random(0))],
                       params, "tests.tune.faulty:run_batch", child)
        assert [r.error for r in good] == [None, None] and all(r.cost > 0 for r in good)
        first = child.proc.pid
        again = measure(task, str(target), target_key(target), [{}], params, "tests.tune.faulty:run_batch", child)
        assert again[0].error is None and child.proc.pid == first        # the same child served both batches
        mixed = measure(task, str(target), target_key(target), [{}, {"fault": "crash"}, {"fault": "hang"}], params,
                        "tests.tune.faulty:run_batch", child)
        assert [r.error for r in mixed] == [None, "crash", "hang"], mixed
    finally:
        child.close()


def test_clone_graph_gives_every_value_a_new_id():
    """A measurement child unpickles its parent's graph, ids and all: the clone it builds must not share one with
    the values the child makes (a collision mis-wired or broke builds)."""
    from fxc.tuning.tasks import clone_graph
    m, x = small()
    g = graph_of(m, x)
    old = {v.id for v in g.inputs} | {o.id for n in g.nodes for o in n.outputs} \
        | {v.id for n in g.nodes for v in n.inputs}
    c = clone_graph(g)
    new = {v.id for v in c.inputs} | {o.id for n in c.nodes for o in n.outputs} \
        | {v.id for n in c.nodes for v in n.inputs}
    assert any(v.is_const for n in c.nodes for v in n.inputs)
    assert not old & new
    assert [n.op for n in c.nodes] == [n.op for n in g.nodes] and len(c.inputs) == len(g.inputs)
