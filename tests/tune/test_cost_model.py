"""The cost model learns a synthetic set whose order is known, online as the tuner feeds it (and learns nothing from
the same set with its costs shuffled: the check can fail)."""
import numpy as np
import pytest

from fxc.tuning.cost_model import CostModel, spearman
from fxc.tuning.features import NAMES

pytest.importorskip("xgboost")


def _learn(shuffle: bool, seed: int = 0) -> CostModel:
    """Six tasks of different shapes, rounds of four candidates each (then the default as a control), learnt in
    order: a candidate's log(cost / default) is a fixed function of its features' differences from its task's
    default (a few features matter, one through a threshold), plus 5% noise."""
    rng = np.random.default_rng(seed)
    n = len(NAMES)
    bases = [rng.uniform(2, 12, n) for _ in range(6)]
    defaults = [10.0 ** rng.uniform(-5, -3) for _ in range(6)]
    model = CostModel(seed)
    for _ in range(12):
        for t, (base, d) in enumerate(zip(bases, defaults)):
            feats = [base + rng.normal(0, 0.5, n) for _ in range(4)] + [base]
            rel = [0.6 * (f[1] - base[1]) - 0.4 * (f[7] - base[7]) + 0.8 * max(0.0, f[3] - base[3]) for f in feats]
            costs = [d * float(np.exp(r + rng.normal(0, 0.05))) for r in rel]
            if shuffle:
                rng.shuffle(costs)
            model.update(f"task{t}", [f.astype(np.float32) for f in feats], costs, d, base.astype(np.float32))
    return model


def test_model_ranks_a_known_order_and_not_a_shuffled_one():
    learnt = _learn(shuffle=False)
    assert learnt.correlations and learnt.task_correlations
    assert learnt.correlations[-1][1] >= 0.8, learnt.correlations[-5:]
    assert learnt.task_correlations[-1][1] >= 0.7, learnt.task_correlations[-5:]
    shuffled = _learn(shuffle=True)
    assert abs(shuffled.correlations[-1][1]) < 0.3, shuffled.correlations[-5:]
    assert abs(shuffled.task_correlations[-1][1]) < 0.3, shuffled.task_correlations[-5:]


def test_predictions_before_training_and_spearman():
    m = CostModel()
    base = np.zeros(len(NAMES), np.float32)
    assert list(m.predict([base, base], base)) == [0.0, 0.0]
    m.update("t", [base], [1e-3], float("inf"), base)          # no default measured yet: nothing learnt
    assert m.correlations == [] and m.model is None
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert np.isnan(spearman(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])))
