"""Matrix exponential (`matrix_exp`, ATen linalg_matrix_exp): scaling and squaring in float64 scratch.

A is scaled by 2^-s so that its 1-norm is at most 1/2, the degree-18 Taylor polynomial is evaluated by
Horner's rule (truncation error below 1e-22 there), and the result is squared s times. Batch in parallel.
Through torch.compile, a call whose results are not all finite runs again in eager (`eager_unless_finite`): where
exp(A) overflows, eager's inf/NaN pattern comes from its own float32 squarings, which fxc does not reproduce.
The kernels' loop IR is fxc/lowering/extern/linalg_exp.py.
"""
from __future__ import annotations

import math

import numpy as np

from ..lowering import te
from ..lowering.extern.linalg_exp import matrix_exp_loops
from .linalg_factor import FLT, scratch_check, square_dims
from .registry import Kind, OpDef, register


def _matrix_exp(a):
    bs, n, _ = square_dims(a, "matrix_exp")
    batch = math.prod(bs)
    lower = matrix_exp_loops(batch, n)
    return te.extern([(a.shape, a.dtype)], [a], lower, "matrix_exp")[0]


def _matrix_exp_ref(a):
    out = np.zeros(a.shape)
    for idx in np.ndindex(*a.shape[:-2]):
        x = a[idx].astype(np.float64)
        s = max(0, int(np.ceil(np.log2(max(np.abs(x).sum(0).max(), 1e-300) * 2))))
        x = x / 2.0 ** s
        e, term = np.eye(len(x)), np.eye(len(x))
        for k in range(1, 30):
            term = term @ x / k
            e = e + term
        for _ in range(s):
            e = e @ e
        out[idx] = e
    return out.astype(a.dtype)


def _matrix_exp_aten(b, a):
    # float32 inputs are computed in float64 and rounded once: closer to the exact answer than eager's float32
    return b.call("matrix_exp", [a])


register(OpDef("matrix_exp", Kind.OPAQUE, lambda types: [types[0]], _matrix_exp_ref, _matrix_exp,
               {"aten.linalg_matrix_exp.default": _matrix_exp_aten}, None,
               lambda rng: [([rng.uniform(-1, 1, (4, 4)).astype("float32")], {}),
                            ([rng.uniform(-3, 3, (2, 5, 5))], {}),
                            ([np.zeros((3, 3), "float32")], {}), ([np.diag([1.0, -2.0]).astype("float32")], {})],
               FLT, lambda types: scratch_check(3 * types[0].shape[-1] ** 2 + 1),
               doc="exp(A) by scaling and squaring with a degree-18 Taylor polynomial (float64 inside).",
               eager_unless_finite=True))      # an overflow: eager's float32 squarings make NaN (inf - inf)
                                               # where fxc's float64 ones give +-inf (tests/driver/test_contracts.py)
