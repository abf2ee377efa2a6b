"""The op registry: everything about an op in one `OpDef`, defined once in its family file.

An OpDef holds the op's fusion kind, type rule, numpy reference, tensor-expression compute, how its
inputs are promoted, the framework names that map onto it (ATen overloads here; ONNX/MXNet in their
importers' tables keyed by these op names) and sample inputs for the generated tests.
This module imports no framework: ATen converters receive plain Python values and opaque tensor
handles from `fxc.capture.torch.backend`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import UnsupportedOpError


class Kind(enum.IntEnum):
    """Fusion pattern kinds, in TVM's order: a smaller kind fuses more freely."""
    ELEMWISE = 0      # out[i] = f(in[i]) at the same index, same shape
    BROADCAST = 1     # elementwise with broadcasting inputs
    INJECTIVE = 2     # each output element reads a computed index of the input (reshape, permute, slice...)
    REDUCTION = 3     # sums/max over axes; fuses injective prologues and elementwise epilogues
    OUT_FUSABLE = 4   # conv/matmul: elementwise epilogues fuse into the output loop
    OPAQUE = 8        # never fused (sort, scan, scatter...)


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: Kind
    infer: Callable                   # infer(list[TensorType], **attrs) -> list[TensorType]
    reference: Callable               # reference(*np.ndarray, **attrs) -> array or tuple of arrays
    compute: Optional[Callable]       # compute(*te.Tensor, **attrs) -> Tensor or tuple of Tensors
    # "aten.x.overload" -> converter(*args, **kwargs) -> (inputs, attrs) | None
    aten: dict = field(default_factory=dict)
    promote: Optional[str] = "out"    # cast tensor inputs to: "out" dtype, "common" promoted dtype, or None
    samples: Optional[Callable] = None  # samples(rng) -> list of (list[np.ndarray], attrs)
    dtypes: tuple = ("float32", "float64", "int32", "int64", "int8", "uint8", "bool")  # supported input dtypes
    check: Optional[Callable] = None  # check(list[TensorType], **attrs) -> None | reason string (unsupported)
    doc: str = ""
    eager_unless_finite: bool = False  # torch.compile: a call whose results are not all finite reruns in eager
                                       # (fxc cannot show its inf/NaN pattern to be eager's: matrix_exp's overflow)

    @property
    def stands_alone(self) -> bool:
        """The op's kernel is a group of its own (Kind.OPAQUE: sort, scan, softmax, max_pool2d, the linalg
        factorizations, ...): it takes no prologue and gives no epilogue. The one rule that fusion and lowering
        share: such an op's compute may be loop IR written whole (`te.extern`), which reads its inputs from
        buffers and writes whole outputs, so fusion (relay_like/passes/fuse_ops.py) never joins it to another node, and
        lowering (lowering/lower.py) never meets one of its outputs inlined into another op's expression."""
        return self.kind == Kind.OPAQUE


_REGISTRY: dict = {}
_ATEN: dict = {}


_REGISTERED: dict = {}     # name -> the OpDef `register` stored (to tell when an entry was replaced since)


def register(op: OpDef) -> OpDef:
    if op.name in _REGISTRY:
        raise ValueError(f"op {op.name} registered twice")
    _REGISTRY[op.name] = _REGISTERED[op.name] = op
    for target, conv in op.aten.items():
        if target in _ATEN:
            raise ValueError(f"ATen target {target} mapped by both {_ATEN[target][0].name} and {op.name}")
        _ATEN[target] = (op, conv)
    return op


def register_aten(target: str, converter: Callable) -> None:
    """Map an ATen overload to a converter that composes registry ops (no single owning op)."""
    if target in _ATEN:
        raise ValueError(f"ATen target {target} mapped twice")
    _ATEN[target] = (None, converter)


_LOADED = []      # non-empty once loading the families started (not `_REGISTRY` being non-empty: a test
                  # that imports one family file directly must not stop the others from loading)


def _load_families():
    """Import every family file in fxc/ops (each registers its ops when imported), once."""
    if _LOADED:
        return
    _LOADED.append(True)
    import importlib
    import pkgutil
    from pathlib import Path
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name not in ("registry", "common", "__init__"):
            importlib.import_module(f"{__package__}.{info.name}")


def get_op(name: str) -> OpDef:
    _load_families()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnsupportedOpError(f"fxc has no op named {name!r}") from None


def as_registered() -> bool:
    """True when every op is still the OpDef its family file registered (none replaced at run time, e.g. by
    a test): only then may a module come from the on-disk cache."""
    _load_families()
    return all(_REGISTERED.get(n) is op for n, op in _REGISTRY.items())


def all_ops() -> dict:
    _load_families()
    return dict(_REGISTRY)


def aten_table() -> dict:
    """ATen overload name -> (OpDef or None for compositions, converter or None for the default)."""
    _load_families()
    return _ATEN
