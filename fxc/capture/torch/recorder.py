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


@dataclass(frozen=True)
class GraphBreak:
    """Where Dynamo ended a captured graph and why (what follows it to the next graph runs in eager PyTorch)."""
    reason: str         # Dynamo's heading: "Data-dependent branching", "Dynamic shape operator"
    detail: str         # its explanation ("Operator `aten.nonzero.default`'s output shape depends on ...")
    where: str          # the user's line: "model.py:12 in forward: if x.sum() > 0:"

    def __str__(self):
        return f"{self.where}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Failure:
    """A subgraph that fxc could not compile (for a device, a dtype): its ops ran in eager PyTorch."""
    subgraph: str
    error: str          # "LoweringError: ..."
    ops: tuple = ()     # ((op, count), ...): what ran eagerly because of it

    def __str__(self):
        return f"{self.subgraph}: {self.error}"


@dataclass(frozen=True)
class DroppedSymbol:
    """Size symbols a subgraph could not keep symbolic: it builds once per size of them."""
    subgraph: str
    symbols: tuple      # the symbols' names ("batch", "s0")
    reason: str         # the error, naming the op ("cat -> float32[1, 4, s0+1, 32]: ...")

    def __str__(self):
        return f"{self.subgraph}: {', '.join(self.symbols)} -> one build per size ({self.reason})"


@dataclass
class Explanation:
    """What fxc.explain reports: counts by op of what compiled and what ran in eager PyTorch (with the reason per
    op), Dynamo's graph breaks, subgraphs that failed to compile, symbols that were dropped, and the kernels."""
    compiled_ops: collections.Counter = field(default_factory=collections.Counter)
    fallback_ops: collections.Counter = field(default_factory=collections.Counter)
    fallback_reasons: dict = field(default_factory=dict)
    kernels: list = field(default_factory=list)
    graphs: int = 0
    subgraphs: int = 0
    failures: list = field(default_factory=list)   # Failure: subgraphs that failed to compile and ran eagerly
    graph_breaks: list = field(default_factory=list)    # GraphBreak: where Dynamo split the model, and why
    dropped_symbols: list = field(default_factory=list)     # DroppedSymbol: dynamic sizes built per size
    notes: list = field(default_factory=list)      # what ran outside every captured graph, and the switch for it
    inference_graphs: int = 0      # graphs compiled for grad mode off, without AOT autograd (inference.py)
    captured: list = field(default_factory=list)   # (fused FX graph, its weights' placeholder names): explain's picture
    offload: list = field(default_factory=list)    # a target's -libs=: its regions, and why each op runs where

    def fail(self, failure: Failure) -> None:
        """A subgraph failed: its ops count as eager, with the error as their reason."""
        self.failures.append(failure)
        for op, n in failure.ops:
            self.compiled_ops[op] -= n
            self.fallback_ops[op] += n
            self.fallback_reasons.setdefault(op, f"its subgraph failed to compile ({failure.error[:200]})")
        self.compiled_ops = +self.compiled_ops     # (drops the ops now at zero)

    def __str__(self):
        failed = f" ({len(self.failures)} failed to compile)" if self.failures else ""
        lines = [f"fxc: {self.graphs} captured graph(s), {len(self.graph_breaks)} graph break(s), {self.subgraphs} "
                 f"subgraph(s) for fxc{failed}, {sum(self.compiled_ops.values())} ops compiled, "
                 f"{sum(self.fallback_ops.values())} fell back"]
        lines += [f"note: {n}" for n in self.notes]
        if self.graph_breaks:
            lines.append("graph breaks (the code between graphs ran in eager PyTorch):")
            lines += [f"  {b}" for b in self.graph_breaks]
        if self.failures:
            lines.append("subgraphs that failed to compile (ran in eager PyTorch):")
            lines += [f"  {f}" for f in self.failures]
        if self.dropped_symbols:
            lines.append("dynamic sizes built once per size:")
            lines += [f"  {d}" for d in self.dropped_symbols]
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


def first_time(key: str) -> bool:
    """True the first time in this process that `key` is asked about (tests clear `_warned`)."""
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
        return True


def _say_once(key: str, message: str, *args):
    """log.warning(message, *args), once per process for `key`."""
    if first_time(key):
        log.warning(message, *args)
