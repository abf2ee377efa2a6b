"""The GPU family's register-tile knobs on opencl (PoCL here), applied from a tuning log as any tuned record is:
`gemm_vector` (each work-item's column blocks are float vectors: vector loads, broadcast rows), `gemm_lockstep` (the
work-group steps through a product's reduction together: a barrier per step of its outer loop, the inner loops
unrolled) and `gemm_tile_rows` (work-groups that are not square). Random valid configs with them
compute what the op's numpy reference does on the op sample's products (conv2d, conv_transpose2d, matmul), and what
eager PyTorch does on convs of ResNet-18's kinds (7x7 / 2, 3x3 / 1 and / 2, 1x1 / 2, with batch norm, a residual add
and ReLU); their defaults (off) leave a conv's kernel without barriers or vector loads."""
import json
import random
import re

import numpy as np
import pytest
import torch

from fxc.driver.build import build
from fxc.lowering.schedules.gpu import Knobs, knob_space
from fxc.ops.registry import all_ops
from fxc.target import Caps
from fxc.tuning.log import append, make_record
from fxc.tuning.tasks import clone_graph, extract_tasks
from fxc.tuning.workload import target_key
from tests.helpers import assert_close_np
from tests.helpers_devices import CASES, sample_graph

PRODUCTS = [(n, k) for n, k in CASES if n in ("conv2d", "conv_transpose2d", "matmul")]
VECTOR_LOAD = re.compile(r"\bvload\d+\(")
NEW = {"gemm_lockstep": 0, "gemm_tile_rows": 0, "gemm_vector": 1}


def _config(space, rng) -> dict:
    """A random valid config of the whole space with register tiles in use, vectors on and the other new knobs at
    random."""
    for _ in range(500):
        c = space.full(space.sample(rng))
        c["gemm_vector"] = rng.choice([v for v in space.knobs["gemm_vector"].choices if v > 1])
        c["gemm_lockstep"] = rng.choice(space.knobs["gemm_lockstep"].choices)
        c["gemm_tile_rows"] = rng.choice(space.knobs["gemm_tile_rows"].choices)
        c["gemm_tile"] = rng.choice([v for v in space.knobs["gemm_tile"].choices if v > 1])
        if space.valid(c):
            return space.minimal(c)
    raise AssertionError("no valid config with the new knobs on")


def _built(graph, config_of, tmp_path, name: str):
    """graph built for opencl with a tuning log giving each of its tasks config_of(task.space); (module, configs)."""
    filled, tasks = extract_tasks(clone_graph(graph), "opencl")
    log = tmp_path / f"{name}.jsonl"
    log.touch()
    configs = []
    for t in tasks:
        c = config_of(t.space)
        configs.append(c)
        append(log, make_record(t.key, target_key(filled), c, [1.0], None, t.desc, str(filled)))
    return build(clone_graph(graph), filled, tuning_log=str(log)), configs


def test_new_knobs_default_off():
    for caps in (Caps(max_work_group_size=4096, local_memory_bytes=1 << 20, vector_widths=frozenset({2, 4, 8, 16})),
                 Caps(max_work_group_size=1024, local_memory_bytes=48 << 10,
                      features=frozenset({"dedicated_local_memory"}))):
        space = knob_space(caps)
        assert {n: space.knobs[n].default for n in NEW} == NEW
        assert {n: getattr(Knobs.for_caps(caps), n) for n in NEW} == NEW
        assert not space.valid({"gemm_rows": 8, "gemm_cols": 4, "gemm_vector": 8})     # 256 accumulators
    small = knob_space(Caps(max_work_group_size=256, local_memory_bytes=1 << 15))
    assert small.valid({"gemm_tile": 16}) and not small.valid({"gemm_tile": 16, "gemm_tile_rows": 32})   # 512 > 256
    assert knob_space(Caps(max_work_group_size=1)).knobs["gemm_lockstep"].choices == (0,)    # no work-groups


@pytest.mark.parametrize("name,k", PRODUCTS, ids=[f"{n}-{k}" for n, k in PRODUCTS])
def test_new_knobs_compute_the_reference(name, k, tmp_path):
    op = all_ops()[name]
    arrays, attrs = op.samples(np.random.default_rng(k))[k]
    graph = sample_graph(name, arrays, attrs)
    ref = op.reference(*arrays, **attrs)
    rng = random.Random(k)
    for trial in range(3):
        module, configs = _built(graph, lambda s: _config(s, rng), tmp_path, f"c{trial}")
        np.testing.assert_allclose(module(*arrays), np.asarray(ref), rtol=1e-4, atol=1e-4, err_msg=json.dumps(configs))
        assert any("[tuned:" in line for line in module.kernels), module.kernels


class Convs(torch.nn.Module):
    """ResNet-18's conv kinds, small: a 7x7 / 2 stem, a 3x3 / 2 conv with a 1x1 / 2 shortcut, a 3x3 / 1 one (16
    columns wide: every vector width divides its rows)."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = torch.nn.Conv2d(3, 8, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(8)
        self.down, self.short = torch.nn.Conv2d(8, 16, 3, 2, 1), torch.nn.Conv2d(8, 16, 1, 2)
        self.conv = torch.nn.Conv2d(16, 16, 3, 1, 1)

    def forward(self, x):
        y = torch.relu(self.bn(self.stem(x)))
        y = torch.relu(self.down(y) + self.short(y))
        return torch.relu(self.conv(y) + y)


def test_new_knobs_on_resnet_convs(tmp_path):
    """Random configs compute what eager does; each form of the code is there: vector loads with gemm_vector, barriers
    with gemm_lockstep alone."""
    from fxc.tuning.frontends import graph_of
    torch.manual_seed(0)
    model, x = Convs().eval(), torch.randn(1, 3, 32, 64)
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
        want = model(x).numpy()
    graph = graph_of(model, (x,))
    default = build(clone_graph(graph), "opencl", tuning_log=False)
    assert "barrier(" not in default.source and not VECTOR_LOAD.search(default.source)   # the defaults: scalar code
    assert_close_np(default(x.numpy()), want)
    rng = random.Random(0)
    for trial in range(3):
        module, configs = _built(graph, lambda s: _config(s, rng), tmp_path, f"r{trial}")
        assert VECTOR_LOAD.search(module.source), json.dumps(configs)
        np.testing.assert_allclose(module(x.numpy()), want, rtol=1e-4, atol=1e-4, err_msg=json.dumps(configs))
    lockstep, _ = _built(graph, lambda s: {"gemm_lockstep": 2}, tmp_path, "lockstep")
    assert "barrier(" in lockstep.source and not VECTOR_LOAD.search(lockstep.source)
    assert_close_np(lockstep(x.numpy()), want, rtol=1e-4, atol=1e-4)
