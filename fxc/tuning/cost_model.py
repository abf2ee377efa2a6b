"""The cost model: gradient-boosted trees (xgboost) trained online on the measured candidates of every task.

Takes, per round of a task, its candidates' feature vectors (fxc/tuning/features.py; the fixed-length loop part,
taken relative to the task's default config's: log ratios, so one model serves tasks of every size), their measured
costs and the task's default cost; learns log(cost / the task's default cost), the candidate's speed relative to its
task's default schedule, so what it learns on one workload carries to the others. Produces predictions (lower:
faster) and, from each round predicted before the model trains on it (held out), two rank correlations with the
measurements over the latest 200: pooled over the tasks on log(cost / default) (`correlations`), and within each task
averaged over the tasks (`task_correlations`). Without xgboost (an optional extra, fxc[tune]) every prediction is 0:
the search then samples at random. benchmarks/tune_model.py replays a tuning log through it.
"""
from __future__ import annotations

import numpy as np

from .features import NAMES

try:
    import xgboost
except ImportError:         # the tune extra is optional: the search then runs on random proposals
    xgboost = None

HELD_OUT = 200              # the rank correlation is over this many latest held-out predictions
TASK_MIN = 5                # a task's own correlation counts once it has this many of them
LOOP = len(NAMES)           # the loop-IR part of a feature vector (the knob values that follow vary by task)


class CostModel:
    def __init__(self, seed: int = 0):
        self.xs, self.ys, self.model, self.seed = [], [], None, seed
        self.correlations: list = []        # (measurements so far, Spearman rho of the held-out predictions)
        self.task_correlations: list = []   # (measurements so far, mean over tasks of each task's own rho)
        self.held_out: list = []            # (task, prediction, measured log(cost / default), log cost)

    @property
    def available(self) -> bool:
        return xgboost is not None

    @staticmethod
    def encode(feats: list, base) -> np.ndarray:
        """The model's input: each candidate's loop-IR features relative to its task's default (log ratios: 0 for
        the default itself), so what it learns of a change carries across tasks of different sizes."""
        return np.stack([f[:LOOP] for f in feats]) - np.asarray(base[:LOOP])

    def predict(self, feats: list, base) -> np.ndarray:
        """Predicted log(cost / default) of a task's candidates (lower: faster); base: the task's default's
        features."""
        if self.model is None or not feats:
            return np.zeros(len(feats))
        return self.model.predict(xgboost.DMatrix(self.encode(feats, base)))

    def update(self, task: str, feats: list, costs: list, default_cost: float, base) -> None:
        """Add a round of task's measured candidates (inf costs: errors, learnt as much slower) and retrain."""
        if not (np.isfinite(default_cost) and default_cost > 0) or not feats:
            return
        if self.model is not None:
            pred = self.predict(feats, base)
            self.held_out += [(task, float(p), float(np.log(min(c, 1e3 * default_cost) / default_cost)),
                               float(np.log(c))) for p, c in zip(pred, costs) if np.isfinite(c)]
            self._score()
        self.xs += list(self.encode(feats, base))
        self.ys += [float(np.log(min(c, 10 * default_cost) / default_cost)) for c in costs]
        if xgboost is None or len(self.ys) < 8:
            return
        data = xgboost.DMatrix(np.stack(self.xs), label=np.array(self.ys))
        self.model = xgboost.train({"max_depth": 4, "min_child_weight": 3, "eta": 0.2, "subsample": 0.9,
                                    "seed": self.seed, "nthread": 1, "verbosity": 0}, data, num_boost_round=60)

    def _score(self) -> None:
        recent = self.held_out[-HELD_OUT:]
        if len(recent) < 10:
            return
        rho = spearman(np.array([h[1] for h in recent]), np.array([h[2] for h in recent]))
        if np.isfinite(rho):
            self.correlations.append((len(self.ys), rho))
        tasks: dict = {}
        for t, p, _, m in recent:
            tasks.setdefault(t, []).append((p, m))
        rhos = [spearman(np.array([p for p, _ in v]), np.array([m for _, m in v]))
                for v in tasks.values() if len(v) >= TASK_MIN]
        rhos = [r for r in rhos if np.isfinite(r)]
        if rhos:
            self.task_correlations.append((len(self.ys), float(np.mean(rhos))))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two vectors, ties sharing their mean rank (nan when either is constant)."""
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(a: np.ndarray) -> np.ndarray:
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    starts = np.cumsum(counts) - counts
    return (starts + (counts - 1) / 2)[inverse]
