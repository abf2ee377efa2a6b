"""The search: an evolutionary search over the cost model's predictions proposes the next candidates of a task.

Takes a Task (its Space), the configs measured so far with their costs, the cost model and a feature function;
produces `batch` configs not measured yet, each making code no measured config made: the population is the best
measured configs mutated plus random valid samples (every config, for a space this small), ranked by the model; the
best few are taken, and a share of random ones keeps the model honest (exploration).
"""
from __future__ import annotations

import json
import random


def config_id(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def propose(task, measured: dict, model, analyse, batch: int, rng: random.Random, population: int = 32,
            explore: float = 0.25, seen_code: set | None = None) -> list:
    """Up to `batch` new configs for task. measured: config_id -> cost (inf for an error); analyse(config) ->
    (features, code digest); seen_code: the digests measured already (a config whose code is among them, or another
    candidate's, is not proposed: it would measure the same kernels again)."""
    space = task.space
    pool: dict = {}
    if space.size() <= population:          # small: every valid config
        for c in space.all():
            pool.setdefault(config_id(c), c)
    else:
        best = sorted((cost, cid) for cid, cost in measured.items() if cost < float("inf"))[:8]
        parents = [json.loads(cid) for _, cid in best] or [{}]
        for _ in range(population * 4):
            if len(pool) >= population:
                break
            c = space.mutate(rng.choice(parents), rng) if rng.random() < 0.7 else space.sample(rng)
            pool.setdefault(config_id(c), c)
    fresh = [c for cid, c in pool.items() if cid not in measured]
    if seen_code is not None:
        codes, unique = set(seen_code), []
        for c in fresh:
            code = analyse(c)[1]
            if code not in codes:
                codes.add(code)
                unique.append(c)
        fresh = unique
    if not fresh:
        return []
    n_random = max(1 if len(fresh) > batch else 0, int(batch * explore)) if model.model is not None else batch
    rng.shuffle(fresh)
    chosen = fresh[:n_random]
    rest = fresh[n_random:]
    if rest and len(chosen) < batch:
        scores = model.predict([analyse(c)[0] for c in rest], analyse({})[0])
        order = sorted(range(len(rest)), key=lambda i: scores[i])
        chosen += [rest[i] for i in order[:batch - len(chosen)]]
    return chosen[:batch]
