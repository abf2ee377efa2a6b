"""The CPU knobs of MobileNetV2's pointwise convs (conv2d.vectors, conv2d.order): their defaults are the schedule's
own choices, random valid configs that set them compute what the default does (the registry's conv2d_packed samples,
and MobileNetV2's blocks in NCHW16c, whose 40 and 160 channels leave padding blocks in the packed weights), and the
register constraint between conv2d.vectors and conv2d.rows rejects tiles that do not fit."""
import random
import re

import numpy as np
import pytest
import torch

from fxc.driver.build import build
from fxc.driver.groups import group_kernel
from fxc.lowering.loop_ir import format_kernel
from fxc.lowering.schedules.cpu.gemm import acc_vectors
from fxc.lowering.schedules.knobs import Chooser
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.tuning.frontends import graph_of
from fxc.tuning.log import append, make_record
from fxc.tuning.measure import example_arrays
from fxc.tuning.tasks import clone_graph, extract_tasks
from fxc.tuning.workload import target_key

NEW = ("conv2d.vectors", "conv2d.order")


def _op_graph(name: str, k: int):
    arrays, attrs = all_ops()[name].samples(np.random.default_rng(k))[k]
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype)) for a in arrays]
    b.graph.outputs = list(b.graph.call(name, ins, **attrs))
    return b.graph, arrays


class Block(torch.nn.Module):
    """Two of MobileNetV2's inverted residuals (1x1 expand, 3x3 depthwise, 1x1 project; the residual add in the
    first) at 12x12, the second projecting to 40 channels (NCHW): 3 blocks of 16, packed as 4 for tiles of 2 vectors."""

    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv2d
        self.expand, self.dw, self.project = conv(32, 96, 1), conv(96, 96, 3, padding=1, groups=96), conv(96, 32, 1)
        self.expand2, self.dw2, self.project2 = conv(32, 192, 1), conv(192, 192, 3, padding=1, groups=192), \
            conv(192, 40, 1)

    def forward(self, x):
        relu6 = torch.nn.functional.relu6
        y = self.project(relu6(self.dw(relu6(self.expand(x))))) + x
        return self.project2(relu6(self.dw2(relu6(self.expand2(y)))))


def _block():
    torch.manual_seed(0)
    m, x = Block().eval(), torch.randn(1, 32, 12, 12)
    graph = graph_of(m, (x,))
    return graph, example_arrays(graph)


def _configs(space, rng, n: int) -> list:
    """Random valid configs of `space` that set new knobs off their default: one for each new knob it offers, then
    more up to n."""
    every = space.all()
    out = [rng.choice(pool) for k in NEW for pool in [[c for c in every if k in c]] if pool]
    rest = [c for c in every if any(k in c for k in NEW) and c not in out]
    return out + rng.sample(rest, min(max(0, n - len(out)), len(rest)))


def _check(graph, arrays, tmp_path, n: int, target: str = "llvm") -> tuple:
    """Each task's random configs (new knobs set) built into the whole graph against the default build; returns
    (the new knobs the tasks offer a choice of, those the configs set)."""
    filled, tasks = extract_tasks(graph, target)
    want = build(clone_graph(graph), filled, tuning_log=False)(*arrays)
    rng, seen = random.Random(7), set()
    offered = {k for t in tasks for k in NEW if len(getattr(t.space.knobs.get(k), "choices", ())) > 1}
    for t in tasks:
        assert t.space.valid({}), t.space.violations({})
        for i, config in enumerate(_configs(t.space, rng, n)):
            assert t.space.valid(config), t.space.violations(config)
            log = tmp_path / f"{t.key}-{i}.jsonl"
            append(log, make_record(t.key, target_key(filled), config, [1.0], None, t.desc, str(filled)))
            got = build(clone_graph(graph), filled, tuning_log=str(log))(*arrays)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{t.desc}: {config}")
            seen |= {k for k in NEW if k in config}
    return offered, seen


@pytest.mark.parametrize("k", range(8))
def test_random_configs_on_the_op_sample(k, tmp_path):
    graph, arrays = _op_graph("conv2d_packed", k)
    offered, seen = _check(graph, arrays, tmp_path, 2)
    assert seen == offered
    if k in (1, 4):     # 40 and 48 channels: 3 blocks used of 4 packed
        assert "conv2d.vectors" in offered


def test_random_configs_on_inverted_residual_blocks(tmp_path):
    graph, arrays = _block()
    _, tasks = extract_tasks(graph, "llvm")
    forty = next(t.space.knobs["conv2d.vectors"] for t in tasks if "[1, 40, 12, 12]" in t.desc)
    assert forty.default == 2 and 3 in forty.choices, forty       # 3 blocks of the 4 packed: one tile, no padding
    assert _check(graph, arrays, tmp_path, 4) == (set(NEW), set(NEW))


def _canonical(text: str) -> str:
    """A kernel's text with its numbered names (loop variables take a process-wide counter) renumbered in order of
    first appearance."""
    names: dict = {}
    return re.sub(r"\b[A-Za-z_]\w*\d\b", lambda m: names.setdefault(m.group(), f"n{len(names)}"), text)


def test_defaults_are_the_schedules_choices():
    """The space's defaults, given as an explicit config, lower to the same loops as no config at all."""
    graph, _ = _block()
    filled, tasks = extract_tasks(graph, "llvm")
    for t in tasks:
        if t.group is None or not any(k in t.space.knobs for k in NEW):
            continue
        plain = _canonical(format_kernel(group_kernel(t.group, "k", t.threads, filled)))
        explicit = _canonical(format_kernel(group_kernel(t.group, "k", t.threads, filled,
                                                         knobs=Chooser(t.space.defaults()))))
        assert plain == explicit, t.desc


def test_register_constraints():
    graph, _ = _block()
    filled, tasks = extract_tasks(graph, "llvm")
    acc = acc_vectors(filled.caps)
    space = next(t.space for t in tasks if len(getattr(t.space.knobs.get("conv2d.vectors"), "choices", ())) > 1)
    big = max(space.knobs["conv2d.vectors"].choices)
    rows = max(space.knobs["conv2d.rows"].choices)
    assert rows * big > acc
    bad = space.violations({"conv2d.vectors": big, "conv2d.rows": rows})
    assert bad and "accumulator registers" in bad[0]
    assert space.valid({"conv2d.vectors": big, "conv2d.rows": max(1, acc // big)})
