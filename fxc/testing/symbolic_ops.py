"""Registry ops with a symbolic dim: each op's samples built once with one dim a size symbol (the leading one, or
with --last the last dim of a sample of two or more dims: a non-leading one), run at the sample's size and at 2n+1,
against the op's numpy reference (issue 26's symbolic type-rule tests).

    python -m fxc.testing.symbolic_ops            # every op, every sample: counts of symbolic / per-size ops
    python -m fxc.testing.symbolic_ops --last     # the same with the last dim symbolic

An op whose sample cannot be built with the symbol (a type rule that needs the size, an op reading other rows
than it writes) is "per size": torch.compile then builds it per size, fxc.from_torch names it. A symbolic build
whose results differ from the reference raises AssertionError: that is a bug.
"""
from __future__ import annotations

import sys

import numpy as np

from ..driver.build import build
from ..errors import FxcError
from ..ops.registry import all_ops
from ..relay_like.builder import Builder
from ..symbolic.expr import Sym
from ..symbolic.sym import SymInfo


def _dtype(a) -> str:
    return "bool" if a.dtype == np.bool_ else str(a.dtype)


def check_symbolic(name: str, k: int, last: bool = False) -> str:
    """'symbolic' when sample k of op `name` builds with its leading dim (last: its last dim, for samples of two
    dims or more; the inputs of as many dims with the same size there share the symbol) symbolic and matches the
    reference at two sizes; 'per size: <why>' when it does not build so; AssertionError on a wrong result."""
    op = all_ops()[name]
    arrays, attrs = op.samples(np.random.default_rng(k))[k]
    if not arrays or arrays[0].ndim < (2 if last else 1) or arrays[0].shape[-1 if last else 0] < 1:
        return "per size: no leading dim" if not last else "per size: fewer than two dims"
    n = arrays[0].shape[-1 if last else 0]
    axes = [(a.ndim - 1 if last else 0) for a in arrays]      # (trailing dims broadcast: every input's last)
    rows = [a.ndim > 0 and a.shape[ax] == n for a, ax in zip(arrays, axes)]
    sym = Sym("n")
    b = Builder()
    ins = [b.graph.input((a.shape[:ax] + (sym,) + a.shape[ax + 1:]) if r else a.shape, _dtype(a))
           for a, r, ax in zip(arrays, rows, axes)]
    b.graph.symbols = {"n": SymInfo("n", 1, 4 * n + 4)}
    try:
        outs = b.graph.call(name, ins, **attrs)
        b.graph.outputs = list(outs)
        module = build(b.graph)
    except (FxcError, TypeError, ValueError) as e:
        return f"per size: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    if not module.symbols:
        return "per size: the results do not depend on the symbol"
    longer = [np.concatenate([a, a, np.take(a, [0], axis=ax)], axis=ax) if r else a
              for a, r, ax in zip(arrays, rows, axes)]
    for ins_ in (arrays, longer):
        try:
            ref = op.reference(*ins_, **attrs)
        except (ValueError, IndexError, np.linalg.LinAlgError):
            if ins_ is arrays:
                raise
            return "symbolic (checked at n: the op is undefined at 2n+1, a shape relation its type rule lacks)"
        ref = ref if isinstance(ref, tuple) else (ref,)
        got = module(*ins_)
        got = got if isinstance(got, list) else [got]
        for g, r in zip(got, ref):
            r = np.asarray(r).astype(g.dtype)
            assert g.shape == r.shape, (name, k, g.shape, r.shape)
            if g.dtype.kind == "f":       # (the tolerance of tests/helpers.assert_close_np)
                scale = max(float(np.nanmax(np.abs(r))) if r.size and np.isfinite(r).any() else 1.0, 1.0)
                np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * scale, equal_nan=True, err_msg=f"{name}-{k}")
            else:
                np.testing.assert_array_equal(g, r, err_msg=f"{name}-{k}")
    return "symbolic"


def cases() -> list:
    return [(name, k) for name, op in sorted(all_ops().items()) if op.samples and op.compute
            for k in range(len(op.samples(np.random.default_rng(0))))]


def main(argv=None) -> int:
    last = "--last" in (argv or [])
    results = {}
    for name, k in cases():
        try:
            results[(name, k)] = check_symbolic(name, k, last)
        except AssertionError as e:
            results[(name, k)] = f"WRONG: {str(e).splitlines()[0][:160]}"
        print(f"{name}-{k}: {results[(name, k)]}", flush=True)
    wrong = [c for c, r in results.items() if r.startswith("WRONG")]
    sym = sum(r.startswith("symbolic") for r in results.values())
    print(f"{sym} of {len(results)} samples symbolic, {len(results) - sym - len(wrong)} per size, {len(wrong)} wrong")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
