"""Measurement: the check against the default schedule, and a batch in a persistent child whose candidates crash and
hang, each recorded against the candidate that caused it."""
import random

import numpy as np

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


def test_crash_and_hang_in_a_persistent_child():
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
