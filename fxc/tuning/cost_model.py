"""The cost model: gradient-boosted trees (xgboost) trained online on the measured candidates of every task.

Takes loop-IR feature vectors (fxc/tuning/features.py: the fixed-length loop part, so one model serves all tasks)
and measured costs; learns log(cost / the task's default cost), the candidate's speed relative to its task's default
schedule, so what it learns on one workload carries to the others. Produces predictions (lower: faster) and the rank
correlation of its predictions with the measurements of a batch before it trains on them (held-out quality).
Without xgboost (an optional extra, fxc[tune]) every prediction is 0: the search then samples at random.
"""
from __future__ import annotations

import numpy as np

from .features import NAMES

try:
    import xgboost
except ImportError:         # the tune extra is optional: the search then runs on random proposals
    xgboost = None

HELD_OUT = 200              # the rank correlation is over this many latest held-out predictions
LOOP = len(NAMES)           # the loop-IR part of a feature vector (the knob values that follow vary by task)


class CostModel:
    def __init__(self, seed: int = 0):
        self.xs, self.ys, self.model, self.seed = [], [], None, seed
        self.correlations: list = []        # (measurements so far, Spearman rho of the held-out predictions)
        self.held_out: list = []            # (prediction, measured) of candidates predicted before the model saw them

    @property
    def available(self) -> bool:
        return xgboost is not None

    def predict(self, feats: list) -> np.ndarray:
        if self.model is None or not feats:
            return np.zeros(len(feats))
        return self.model.predict(xgboost.DMatrix(np.stack([f[:LOOP] for f in feats])))

    def update(self, feats: list, costs: list, default_cost: float) -> None:
        """Add measured candidates (inf costs: errors, learnt as much slower) and retrain."""
        ok = [(f, c) for f, c in zip(feats, costs) if np.isfinite(default_cost) and default_cost > 0]
        if self.model is not None and ok:
            pred = self.predict([f for f, _ in ok])
            self.held_out += [(float(p), float(np.log(min(c, 1e3 * default_cost) / default_cost)))
                              for p, (_, c) in zip(pred, ok) if np.isfinite(c)]
            recent = self.held_out[-HELD_OUT:]
            if len(recent) >= 10:
                rho = spearman(np.array([p for p, _ in recent]), np.array([m for _, m in recent]))
                if np.isfinite(rho):
                    self.correlations.append((len(self.ys), rho))
        for f, c in ok:
            self.xs.append(f[:LOOP])
            self.ys.append(float(np.log(min(c, 10 * default_cost) / default_cost)))
        if xgboost is None or len(self.ys) < 8:
            return
        data = xgboost.DMatrix(np.stack(self.xs), label=np.array(self.ys))
        self.model = xgboost.train({"max_depth": 5, "eta": 0.2, "subsample": 0.9, "seed": self.seed, "nthread": 1,
                                    "verbosity": 0}, data, num_boost_round=60)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two vectors (nan when either is constant)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
