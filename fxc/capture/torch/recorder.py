"""What the torch capture reports: the record fxc.explain returns (`Explanation`: what fxc compiled, what fell back
to eager PyTorch and why, the kernels), filled by every compile and call inside a `with recording()` block through
`_record`, and the warnings said once per process (`_say_once`).

Takes nothing but the standard library; the backend (backend.py), the partition runner (partition.py) and
explain.py share it.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import threading
from dataclasses import dataclass, field

log = logging.getLogger("fxc")

_recorders: list = []      # the active Explanations (fxc.explain's, the fuzzer's)


@dataclass
class Explanation:
    compiled_ops: collections.Counter = field(default_factory=collections.Counter)
    fallback_ops: collections.Counter = field(default_factory=collections.Counter)
    fallback_reasons: dict = field(default_factory=dict)
    kernels: list = field(default_factory=list)
    graphs: int = 0
    subgraphs: int = 0
    failures: list = field(default_factory=list)   # subgraphs that failed to compile and ran eagerly
    notes: list = field(default_factory=list)      # what ran outside every captured graph, and the switch for it
    inference_graphs: int = 0      # graphs compiled for grad mode off, without AOT autograd (inference.py)
    captured: list = field(default_factory=list)   # (fused FX graph, its weights' placeholder names): explain's picture
    offload: list = field(default_factory=list)    # a target's -libs=: its regions, and why each op runs where

    def __str__(self):
        lines = [f"fxc: {self.graphs} captured graph(s), {self.subgraphs} compiled subgraph(s), "
                 f"{sum(self.compiled_ops.values())} ops compiled, {sum(self.fallback_ops.values())} fell back"]
        lines += [f"note: {n}" for n in self.notes]
        if self.failures:
            lines.append("subgraphs that failed to compile (ran in eager PyTorch):")
            lines += [f"  {f}" for f in self.failures]
        if self.fallback_ops:
            lines.append("fell back to eager PyTorch:")
            for op, n in self.fallback_ops.most_common():
                lines.append(f"  {op} x{n}: {self.fallback_reasons.get(op, '')}")
        lines.append("compiled ops: " + ", ".join(f"{op} x{n}" for op, n in self.compiled_ops.most_common()))
        if self.offload:
            lines.append("external libraries (-libs=, docs/byoc.md):")
            lines += [f"  {x}" for x in self.offload]
        tuned = sum("[tuned:" in str(k) for k in self.kernels)
        lines.append(f"kernels ({len(self.kernels)}; " + (f"{tuned} with a tuned config [tuned: knobs], the others "
                                                           f"the default schedules):" if tuned else
                                                           "default schedules, no tuned configs):"))
        lines += [f"  {k}" for k in self.kernels]
        return "\n".join(lines)


@contextlib.contextmanager
def recording():
    """An Explanation that every fxc compile and call inside the block fills (fxc.explain, the fuzzer)."""
    rec = Explanation()
    _recorders.append(rec)
    try:
        yield rec
    finally:
        _recorders.remove(rec)


def _record(fn):
    for r in list(_recorders):
        fn(r)


_warned: set = set()        # the keys said once already (tests clear it)
_lock = threading.Lock()


def _say_once(key: str, message: str, *args):
    """log.warning(message, *args), once per process for `key`."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)
