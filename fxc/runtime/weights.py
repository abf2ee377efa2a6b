"""The weight state of every module (CPU, OpenCL, GL, browser): which inputs are weights, and whether a call's
weights are those the module holds something of (ctypes only).

One concept, one name: a module's **weights** are the inputs it keeps something of between calls while they stay
unchanged; what it keeps is **held**: on the CPU their packed forms (in the workspace), on a device their copies
in device memory and what its packing launches made of them. Their index list keeps its serialized name: the
modules' `prepack_inputs` (an artifact's `resident_inputs`); the driver chooses them (CPU: the inputs the packing
step reads; devices: every weight input).

Unchanged means, decided here once: the same **token** as the held one, (addresses, (objects, versions)) from the
caller (the torch capture: each weight tensor and its version counter; None: changed), and the same
**fingerprint**, a hash of FINGERPRINT_WORDS evenly spaced 32-bit words of each weight (a write that kept version
and address, `p.data.copy_(w)`, changes it; one missing every sampled word goes unseen). A CPU library hashes in C
(`fxc_fingerprint`), every other module with `host_fingerprint`: the same words, hashed in Python.
"""
from __future__ import annotations

import ctypes

FINGERPRINT_WORDS = 4      # sampled 32-bit words per weight


def host_fingerprint(addresses, index, offsets, n: int) -> int:
    """fxc_fingerprint in Python: a hash of the 32-bit words at addresses[index[k]] + offsets[k]."""
    return hash(tuple(ctypes.c_uint32.from_address(addresses[index[k]] + offsets[k]).value for k in range(n)))


def same_token(a, b) -> bool:
    """Tokens (addresses, (objects, versions)): equal addresses and versions, the very same objects."""
    if a is None or b is None or a[0] != b[0] or a[1][1] != b[1][1] or len(a[1][0]) != len(b[1][0]):
        return False
    return all(x is y for x, y in zip(a[1][0], b[1][0]))


def token_of(addresses, objects_versions):
    """The token of the weights at `addresses` named by the caller's (objects, versions), or None."""
    return None if objects_versions is None else (tuple(addresses), objects_versions)


def _int64s(values: list):
    return (ctypes.c_int64 * max(len(values), 1))(*values)


class Weights:
    """A module's weights (`inputs`: their indices; `nbytes`: their sizes) and the fingerprint of a call's
    (`fingerprint(addresses of every input)`). fn: the library's fxc_fingerprint or host_fingerprint; None (an
    older CPU library): no fingerprints."""

    def __init__(self, inputs: list, nbytes: list, fn=host_fingerprint):
        self.inputs, self.fn = list(inputs), fn
        index, offsets = [], []
        for i, size in zip(self.inputs, nbytes):
            picks = sorted({k * (size - 4) // (FINGERPRINT_WORDS - 1) // 4 * 4 for k in range(FINGERPRINT_WORDS)})
            picks = picks if size >= 4 else []
            index += [i] * len(picks)
            offsets += picks
        self.n, self._index, self._offsets = len(index), _int64s(index), _int64s(offsets)

    def fingerprint(self, addresses):
        return None if self.fn is None or not self.inputs else self.fn(addresses, self._index, self._offsets, self.n)

    def sample(self, views):
        """A Sample of tensors read through copies, or None without a fingerprint function."""
        return None if self.fn is None else Sample(views, self.fn)


class HeldWeights:
    """The token and fingerprint of the weights one holder (a CPU workspace, a device module) holds forms of."""

    def __init__(self):
        self.token = self.fingerprint = None

    def holds(self, token, fingerprint) -> bool:
        """The same token (the very token object of the last call is taken as unchanged without comparing it: a
        caller reuses one only while it has checked the weights behind it) and the same fingerprint."""
        return token is not None and (token is self.token or same_token(self.token, token)) \
            and fingerprint == self.fingerprint

    def hold(self, token, fingerprint) -> None:
        self.token, self.fingerprint = token, fingerprint

    def drop(self) -> None:
        """Nothing held (a failed call, moved buffers, a packing under way)."""
        self.token = self.fingerprint = None


class Sample:
    """The fingerprint of weights the caller reads through copies (a channels_last model's conv weights): a write
    through `.data` changes neither version nor address, and the module's fingerprint sees only the copy. views:
    (address, shape, strides in elements, item size) per tensor; unchanged(): the sampled words are as they were."""

    def __init__(self, views, fn=host_fingerprint):
        index, offsets = [], []
        for k, (_, shape, strides, size) in enumerate(views):
            numel = 1
            for n in shape:
                numel *= n
            extent = (sum((n - 1) * st for n, st in zip(shape, strides)) + 1) * size   # bytes the view spans
            if numel == 0 or extent < 4:
                continue
            for j in sorted({q * (numel - 1) // (FINGERPRINT_WORDS - 1) for q in range(FINGERPRINT_WORDS)}):
                at, rest = 0, j
                for n, st in zip(reversed(shape), reversed(strides)):
                    at, rest = at + (rest % n) * st, rest // n
                index.append(k)
                offsets.append(min(at * size, extent - 4))
        addresses = [v[0] for v in views]
        self.fn, self.n = fn, len(index)
        self.args = ((ctypes.c_void_p * max(len(views), 1))(*addresses), _int64s(index), _int64s(offsets), self.n)
        self.value = fn(*self.args)

    def unchanged(self) -> bool:
        return self.fn(*self.args) == self.value
