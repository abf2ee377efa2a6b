"""The task scheduler: which task gets the next trials, by expected end-to-end gain.

Takes the Tasks and what is known of each (its best cost, how many runs of it a model call makes, how many rounds
since it last improved, whether its space is exhausted); produces the next task to tune. Every task's default is
measured first (the end-to-end estimate needs it); then a task's expected gain is its share of the end-to-end
latency (count x best cost) times a chance of improving that halves with each round that found nothing better.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TaskState:
    task: object
    measured: dict = field(default_factory=dict)    # config id -> its fastest cost (inf: error)
    samples: dict = field(default_factory=dict)     # config id -> how many times it was measured
    best_cost: float = float("inf")
    best_config: dict = field(default_factory=dict)
    default_cost: float = float("inf")
    stale: int = 0          # rounds since the last improvement
    exhausted: bool = False
    curve: list = field(default_factory=list)       # (trials so far overall, best cost) after each of its rounds
    resumed: int = 0        # records of it the log held before this run

    @property
    def share(self) -> float:
        """Seconds of one end-to-end call spent in this task (at its best so far; prepack tasks run once)."""
        c = self.best_cost if self.best_cost < float("inf") else self.default_cost
        return 0.0 if self.task.prepack or c == float("inf") else c * self.task.count


def next_task(states: list):
    """The state of the task to tune next, or None when none can improve. Graph-level tasks (which change the
    groups) come first, each tried whole; then every group task's default; then the expected gain decides."""
    graph = [s for s in states if s.task.graph_level and not s.exhausted]
    if graph:
        return graph[0]
    fresh = [s for s in states if "{}" not in s.measured]
    if fresh:
        return fresh[0]
    live = [s for s in states if not s.exhausted and s.task.tunable and not s.task.prepack]
    if not live:
        return None
    return max(live, key=lambda s: s.share * 0.5 ** s.stale)


def end_to_end(states: list, default: bool = False) -> float:
    """Estimated seconds of one model call: the sum over per-call tasks of count x (default or best) cost."""
    total = 0.0
    for s in states:
        if s.task.prepack or s.task.graph_level:      # (a graph task's node is inside the groups' times)
            continue
        c = s.default_cost if default else min(s.best_cost, s.default_cost)
        total += s.task.count * (c if c < float("inf") else 0.0)
    return total
