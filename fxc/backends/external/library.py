"""The BYOC data types: a `Pattern` (a chain of graph ops and its check) and a `Library` (an external codegen's
entry: the kinds it serves, its pattern table, its lowering to a plan step, its runtime). Data only: a library's
runtime is named by its module path and imported when first checked."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...runtime.modules import by_name


@dataclass(frozen=True)
class Pattern:
    """A named pattern: a chain of graph ops, the root last, each producer read only by the next (("matmul",);
    CLML's ("conv2d", "add", "relu") fuses its epilogue), and its check: (matched nodes, caps) -> None where the
    library runs them, else the reason it does not (shown by fxc.explain)."""
    name: str
    ops: tuple
    check: Callable

    def match(self, node, users: dict) -> list | None:
        """The nodes of this pattern ending at node (producers first), or None."""
        if node.op != self.ops[-1]:
            return None
        nodes = [node]
        for op in reversed(self.ops[:-1]):
            first = nodes[0]
            prods = [v.node for v in first.inputs if v.node is not None and not v.is_const and v.node.op == op
                     and len(users.get(v.id, [])) == 1]
            if not prods:
                return None
            nodes.insert(0, prods[0])
        return nodes


@dataclass(frozen=True)
class Library:
    """An external codegen: name (as -libs= spells it), the target kinds it serves, its pattern table, lower
    (matched nodes -> (plan step kernel "library:routine", call parameters (ints), the operand Values in the order
    the runtime's step takes them, outputs first)) and runtime (the module whose `check()` loads the library or
    raises a TargetError naming the fix).

    whole_regions (CLML): a region is one call (lower takes the Region: (kernel, call, operands, region graph
    text)), chosen by pattern rather than by measured cost, and fxc's own kernels for its nodes stay in the plan
    behind it: the runtime runs one or the other, whichever the device supports."""
    name: str
    kinds: tuple
    patterns: tuple
    lower: Callable
    runtime: str
    whole_regions: bool = False

    def check_installed(self) -> None:
        """TargetError naming the fix when this host cannot load the library."""
        by_name(f"{self.runtime}:check")()


