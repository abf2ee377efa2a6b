"""benchmarks/tune_model.py: a tuning log replayed through the cost model as the tuner learnt it.

The sample is the first 150 records of a ResNet-18 tuning on a 2-thread AMD EPYC (znver4) host, 2026-12-07
(target "llvm -mcpu=znver4"; its workload keys hold the thread count, so the replay runs with FXC_NUM_THREADS=2).
"""
import random
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.tune_model import prepare, rounds_of, run
from fxc.testing.models import example_inputs, make_model
from fxc.tuning.cost_model import CostModel
from fxc.tuning.frontends import graph_of
from fxc.tuning.log import read

pytest.importorskip("xgboost")
SAMPLE = Path(__file__).parent / "data" / "resnet18-llvm-sample.jsonl"


@pytest.fixture(scope="module")
def replayed():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FXC_NUM_THREADS", "2")
        graph = graph_of(make_model("resnet18"), example_inputs("resnet18"))
        records = read(SAMPLE)
        return records, prepare(graph, records)


def test_replay_rebuilds_the_tuners_rounds(replayed):
    records, rep = replayed
    assert rep.records == len(records) == 150 and rep.unmatched == 0, rep
    assert rep.graph_level == sum(r["desc"].endswith(": winograd") for r in records) == 24
    assert len(rep.rounds) == len(rounds_of(records[24:]))
    assert sum(len(r.costs) for r in rep.rounds) == 150 - 24
    # each round: the candidates, then the default as a control (after each task's first round, its default alone)
    assert all(len(r.feats) == len(r.costs) and r.default_cost > 0 for r in rep.rounds)
    assert all(abs(float(r.feats[-1][0]) - float(r.base[0])) == 0 for r in rep.rounds)


def test_replay_correlations_and_a_shuffled_log(replayed):
    _, rep = replayed
    model = run(rep, CostModel(0))
    assert model.correlations and model.task_correlations
    pooled = model.correlations[-1][1]
    assert pooled >= 0.3, model.correlations[-5:]
    rng = random.Random(0)
    costs = [c for r in rep.rounds for c in r.costs]
    rng.shuffle(costs)
    it = iter(costs)
    shuffled = run(replace(rep, rounds=[replace(r, costs=[next(it) for _ in r.costs]) for r in rep.rounds]),
                   CostModel(0))
    assert shuffled.correlations[-1][1] < pooled - 0.2, (shuffled.correlations[-5:], pooled)
