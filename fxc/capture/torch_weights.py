"""A fingerprint of weights that the torch.compile backend (fxc/capture/torch.py) reads through a copy.

Takes the weight tensors (non-contiguous ones, e.g. the conv weights of a channels_last model) and a compiled
library's fxc_fingerprint; produces an object whose `unchanged()` says whether sampled words of them still hold
the values they held when it was made.
"""
from __future__ import annotations

import ctypes

from ..runtime.cpu import pointer_array
from ..runtime.module import FINGERPRINT_WORDS


class WeightSampler:
    """A fingerprint of sampled words of weights that fxc reads through a copy (non-contiguous ones, e.g. the conv
    weights of a channels_last model): a write through `.data` changes neither their version nor their address,
    and the module's own fingerprint (Module.run_prepared) only sees the copy, so this one tells when the copy is
    stale. A write missing every sampled word goes unseen, as for contiguous weights."""

    def __init__(self, tensors, fingerprint):
        index, offsets = [], []
        for k, t in enumerate(tensors):
            size = t.element_size()
            extent = (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * size   # bytes the view spans
            if t.numel() == 0 or extent < 4:
                continue
            for j in sorted({q * (t.numel() - 1) // max(FINGERPRINT_WORDS - 1, 1) for q in range(FINGERPRINT_WORDS)}):
                at, rest = 0, j
                for n, st in zip(reversed(t.shape), reversed(t.stride())):
                    at, rest = at + (rest % n) * st, rest // n
                index.append(k)
                offsets.append(min(at * size, extent - 4))
        self.fn, self.n = fingerprint, len(index)
        self.args = (pointer_array([t.data_ptr() for t in tensors]), (ctypes.c_int64 * max(self.n, 1))(*index),
                     (ctypes.c_int64 * max(self.n, 1))(*offsets), self.n)
        self.value = self.fn(*self.args)

    @classmethod
    def of(cls, tensors, fingerprint):
        return None if fingerprint is None else cls(tensors, fingerprint)

    def unchanged(self) -> bool:
        return self.fn(*self.args) == self.value
