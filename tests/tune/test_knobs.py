"""Knob spaces: defaults valid and equal to an untuned build; random valid configs compute what the default does."""
import json
import random

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.lowering.schedules.gpu import Knobs, knob_space, knobs_of
from fxc.target import Caps
from fxc.tuning.log import append, make_record
from fxc.tuning.measure import example_arrays
from fxc.tuning.tasks import clone_graph, extract_tasks
from fxc.tuning.workload import target_key
from tests.tune.models import small


def _graph():
    from fxc.tuning.frontends import graph_of
    m, x = small()
    return graph_of(m, x)


@pytest.mark.parametrize("caps", [Caps(max_work_group_size=4096, local_memory_bytes=1 << 20,
                                       vector_widths=frozenset({2, 4, 8, 16})),
                                  Caps(max_work_group_size=1024, local_memory_bytes=48 << 10,
                                       features=frozenset({"dedicated_local_memory"}), vector_widths=frozenset({4}))])
def test_gpu_defaults_are_valid(caps):
    space = knob_space(caps)
    assert len(space.knobs) == 20
    assert space.valid({}), space.violations({})
    assert space.defaults() == {k: getattr(Knobs.for_caps(caps), k) for k in space.knobs}
    assert not space.valid({"work_group_size": 1 << 20})
    assert all(k.doc for k in space.knobs.values())
    assert knobs_of(caps, {"work_group_size": 1 << 20, "nonsense": 1}) == Knobs.for_caps(caps)    # not applied
    assert knobs_of(caps, {"gemm_rows": 2}).gemm_rows == 2


@pytest.mark.parametrize("target", ["llvm", "opencl"])
def test_random_configs_compute_the_default(target, tmp_path):
    graph = _graph()
    filled, tasks = extract_tasks(graph, target)
    assert any(t.tunable for t in tasks)
    arrays = example_arrays(graph)
    want = build(clone_graph(graph), filled, tuning_log=False)(*arrays)
    rng = random.Random(1)
    for trial in range(3):
        log = tmp_path / f"log{trial}.jsonl"
        configs = {}
        for t in tasks:
            configs[t.key] = t.space.sample(rng)
            assert t.space.valid(configs[t.key])
            append(log, make_record(t.key, target_key(filled), configs[t.key], [1.0], None, t.desc, str(filled)))
        module = build(clone_graph(graph), filled, tuning_log=str(log))
        got = module(*arrays)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=json.dumps(list(configs.values())))
        tuned = [k for k in module.kernels if "[tuned:" in str(k)]
        assert tuned, module.kernels


def test_untuned_build_has_no_tuned_lines():
    graph = _graph()
    module = build(graph, "llvm", tuning_log=False)
    assert not any("[tuned" in str(k) for k in module.kernels)
