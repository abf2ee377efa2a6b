"""Measurements on a Dask LocalCluster of two worker processes (127.0.0.1): a crashing and a hanging candidate are
recorded as errors, the others measured, and the tuner's own loop runs on the cluster."""
import pytest

from fxc.tuning.dask import DaskMeasurer, local_cluster, resource_of
from fxc.tuning.frontends import graph_of
from fxc.tuning.measure import MeasureParams
from fxc.tuning.tasks import extract_tasks
from fxc.tuning.workload import target_key
from tests.tune.models import small


@pytest.fixture(scope="module")
def client():
    from fxc.backends import fill
    from fxc.target import Target
    c = local_cluster(2, resource_of(fill(Target.parse("llvm"))))
    yield c
    c.close()
    c.cluster.close()


def test_crash_and_hang_are_recorded_on_a_local_cluster(client):
    m, x = small()
    target, tasks = extract_tasks(graph_of(m, x), "llvm")
    task = next(t for t in tasks if t.tunable and not t.graph_level)
    dm = DaskMeasurer(client, target, target_key(target), MeasureParams(repeat=2, min_repeat_ms=2, timeout_s=20),
                      "tests.tune.faulty:run_batch")
    assert len(client.scheduler_info()["workers"]) == 2
    configs = [{}, {"fault": "crash"}, {"fault": "hang"}]
    futures = [dm.submit(task, [c]) for c in configs]
    results = [dm.gather(f, [c]) for f, c in zip(futures, configs)]
    kinds = [r[0].error for r in results]
    assert kinds == [None, "crash", "hang"], results
    assert results[0][0].cost > 0


def test_tune_on_the_cluster(client, tmp_path):
    import fxc
    m, x = small()
    r = fxc.tune(m, x, target="llvm", trials=3, log=tmp_path / "log.jsonl", dask=client, progress=False)
    assert r.trials == 3 and not r.errors, r


def test_no_worker_with_the_device_is_a_clear_error(client):
    from fxc.errors import FxcError
    from fxc.target import Target
    t = Target.parse("llvm -mcpu=haswell")
    with pytest.raises(FxcError, match="resources"):
        DaskMeasurer(client, t, "k", MeasureParams(), "fxc.tuning.measure:run_batch")
