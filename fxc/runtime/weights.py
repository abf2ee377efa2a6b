"""The weight state of every compiled module (CPU, OpenCL, GL, browser): which inputs are weights, and whether a
call's weights are the ones the module holds something of (numpy-free: ctypes only).

One concept, one name: a module's **weights** are the inputs it keeps something of between calls while they stay
unchanged, and what it keeps is **held**: on the CPU their packed forms (what the packing launches made of them, in
the workspace: `Module.run_prepared`), on a device their copies in device memory and what the device's packing
launches made of them (`DeviceModule`), in a browser page the same inside the page. The index list of the weights
keeps the name it is serialized under: the modules' `prepack_inputs` field (the driver's module cache), an artifact's
`resident_inputs`. The driver decides which inputs they are: on the CPU the inputs the packing step reads, on a
device every weight input (fxc/driver).

Whether the held weights are still the call's is decided here, once, in two parts:

- the **token** the caller gives, (addresses of the weights, (objects, versions)): the torch capture's tensors and
  their version counters (an optimizer step bumps a version, `p.data = t` moves an address, a new Parameter is
  another object). The same token as the held one means unchanged so far; None means changed.
- the **fingerprint**, FINGERPRINT_WORDS evenly spaced 32-bit words of each weight hashed: a write that kept the
  version and the address (PyTorch's `p.data.copy_(w)`) changes it. A CPU library computes it in C
  (`fxc_fingerprint`); every other module with `host_fingerprint`, the same hash in Python. A write missing every
  sampled word goes unseen.

`Weights` (one per module) knows the weights' sample positions and computes fingerprints; `HeldWeights` (one per
thing that holds them: a CPU workspace, a device module) remembers the token and fingerprint of what it holds;
`Sample` fingerprints tensors a caller reads through a copy (the capture's non-contiguous weights), from what the
framework knows of them: address, shape, strides and item size.
"""
from __future__ import annotations

import ctypes

FINGERPRINT_WORDS = 4      # sampled 32-bit words per weight


def host_fingerprint(addresses, index, offsets, n: int) -> int:
    """The CPU library's fxc_fingerprint in Python: a hash of the 32-bit words at addresses[index[k]] + offsets[k]."""
    return hash(tuple(ctypes.c_uint32.from_address(addresses[index[k]] + offsets[k]).value for k in range(n)))


def same_token(a, b) -> bool:
    """Tokens are (addresses, (objects, versions)): equal addresses and versions, the very same objects."""
    if a is None or b is None or a[0] != b[0] or a[1][1] != b[1][1] or len(a[1][0]) != len(b[1][0]):
        return False
    return all(x is y for x, y in zip(a[1][0], b[1][0]))


def token_of(addresses, objects_versions):
    """The token of the weights at `addresses` (all of a module's weights, in order) named by the caller's
    (objects, versions); None when the caller names nothing (every call then counts as changed)."""
    return None if objects_versions is None else (tuple(addresses), objects_versions)


def _positions(nbytes: int) -> list:
    """Byte offsets of FINGERPRINT_WORDS evenly spaced whole words of a tensor of `nbytes` bytes ([] below 4)."""
    if nbytes < 4:
        return []
    return sorted({k * (nbytes - 4) // max(FINGERPRINT_WORDS - 1, 1) // 4 * 4 for k in range(FINGERPRINT_WORDS)})


def _int64s(values: list):
    return (ctypes.c_int64 * max(len(values), 1))(*values)


class Weights:
    """A module's weights: their input indices, and the fingerprint of a call's (`fingerprint(addresses)`, the
    addresses of all of the module's inputs). fn: the fingerprint function (the library's fxc_fingerprint, or
    host_fingerprint); None when there is none (an older CPU library): fingerprints are then None."""

    def __init__(self, inputs: list, nbytes: list, fn=host_fingerprint):
        """inputs: the weights' input indices (the module's prepack_inputs); nbytes: each weight's byte size."""
        self.inputs, self.fn = list(inputs), fn
        index, offsets = [], []
        for i, size in zip(self.inputs, nbytes):
            picks = _positions(size)
            index += [i] * len(picks)
            offsets += picks
        self.n = len(index)
        self._index, self._offsets = _int64s(index), _int64s(offsets)

    def __bool__(self) -> bool:
        return bool(self.inputs)

    def fingerprint(self, addresses):
        """The fingerprint of the weights at these input addresses (a ctypes array or a list), or None."""
        if self.fn is None or not self.inputs:
            return None
        return self.fn(addresses, self._index, self._offsets, self.n)

    def sample(self, views) -> "Sample | None":
        """A Sample of tensors given as (address, shape, strides in elements, item size), or None without a
        fingerprint function."""
        return None if self.fn is None else Sample(views, self.fn)


class HeldWeights:
    """What one holder (a CPU workspace, a device module) holds of the weights: the token and fingerprint of the
    weights its held forms were made from (None: nothing held)."""

    def __init__(self):
        self.token = None
        self.fingerprint = None

    def holds(self, token, fingerprint) -> bool:
        """Whether the held forms are those of the call's weights: the same token (the very token object of the last
        call is taken as unchanged without comparing it: a caller reuses one only while it has checked the weights
        behind it) and the same fingerprint."""
        return token is not None and (token is self.token or same_token(self.token, token)) \
            and fingerprint == self.fingerprint

    def hold(self, token, fingerprint) -> None:
        """The held forms are now those of the weights named by token (None: of unknown weights) and fingerprint."""
        self.token, self.fingerprint = token, fingerprint

    def drop(self) -> None:
        """Nothing is held (a failed call, moved buffers, a repacking under way)."""
        self.token = self.fingerprint = None


class Sample:
    """The fingerprint of tensors read through a copy (e.g. the conv weights of a channels_last model, which fxc
    reads through contiguous copies): a write through `.data` changes neither their version nor their address, and
    the module's own fingerprint only sees the copy, so this one tells when the copy is stale. views: (address,
    shape, strides in elements, item size) per tensor. unchanged(): whether the sampled words still hold the values
    they held when it was made."""

    def __init__(self, views, fn=host_fingerprint):
        index, offsets = [], []
        for k, (_, shape, strides, size) in enumerate(views):
            numel = 1
            for n in shape:
                numel *= n
            extent = (sum((n - 1) * st for n, st in zip(shape, strides)) + 1) * size   # bytes the view spans
            if numel == 0 or extent < 4:
                continue
            for j in sorted({q * (numel - 1) // max(FINGERPRINT_WORDS - 1, 1) for q in range(FINGERPRINT_WORDS)}):
                at, rest = 0, j
                for n, st in zip(reversed(shape), reversed(strides)):
                    at, rest = at + (rest % n) * st, rest // n
                index.append(k)
                offsets.append(min(at * size, extent - 4))
        self.fn, self.n = fn, len(index)
        addresses = [v[0] for v in views]
        self.args = ((ctypes.c_void_p * max(len(addresses), 1))(*addresses), _int64s(index), _int64s(offsets),
                     self.n)
        self.value = self.fn(*self.args)

    def unchanged(self) -> bool:
        return self.fn(*self.args) == self.value
