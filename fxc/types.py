"""TensorType: the type of a tensor in the graph IR (shape and dtype).

Its own module so that `fxc.ops` (the op registry: type rules and computes) and `fxc.relay_like` (the graph IR
and its passes, which apply registry ops) each import it without importing the other's package.
"""
from __future__ import annotations

from dataclasses import dataclass

from .symbolic.sym import canonical


@dataclass(frozen=True)
class TensorType:
    """shape: ints, or int64 expressions of size symbols (fxc/symbolic/sym.py) for dims known at call time."""
    shape: tuple
    dtype: str

    def __post_init__(self):
        if not all(type(d) is int for d in self.shape):
            object.__setattr__(self, "shape", tuple(canonical(d) for d in self.shape))

    @property
    def symbolic(self) -> bool:
        return any(type(d) is not int for d in self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"{self.dtype}{list(self.shape)}"
