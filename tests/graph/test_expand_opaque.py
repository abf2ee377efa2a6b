"""expand_opaque (relay_like/passes/expand_opaque.py): on a target without scatter, layer_norm, softmax,
log_softmax and max_pool2d become compositions of registry ops. Checked on the CPU (fast): every registry sample of
those ops, expanded, against the op's reference; safe softmax's rows of -inf; an integer max_pool2d; and that a
target with scatter keeps the single kernels."""
import dataclasses

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.relay_like.context import PassContext
from fxc.relay_like.passes import expand_opaque, infer_types
from fxc.relay_like.passes.expand_opaque import EXPANSIONS
from fxc.target import Target
from tests.helpers import assert_close_np

HOST = Target.parse("llvm")
NO_SCATTER = PassContext(HOST.with_caps(dataclasses.replace(HOST.caps, scatter=False)))
CASES = [(n, k) for n in sorted(EXPANSIONS) for k in range(len(all_ops()[n].samples(np.random.default_rng(0))))]


def _expanded(name, arrays, attrs):
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype)) for a in arrays]
    outs = b.graph.call(name, ins, **attrs)
    b.graph.outputs = list(outs)
    g = expand_opaque(infer_types(b.graph, NO_SCATTER), NO_SCATTER)
    assert name not in {n.op for n in g.nodes}
    return g, outs


@pytest.mark.parametrize("name,k", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_expansion_matches_reference(name, k):
    op = all_ops()[name]
    arrays, attrs = op.samples(np.random.default_rng(k))[k]
    g, outs = _expanded(name, arrays, attrs)
    got = build(g, target="llvm")(*arrays)
    got = got if isinstance(got, list) else [got]
    ref = op.reference(*arrays, **attrs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert len(got) == len(outs)
    for o, r in zip(got, ref):
        assert_close_np(o, np.asarray(r).astype(o.dtype), rtol=1e-5, atol=1e-6)


def test_safe_softmax_rows_of_minus_inf_give_zeros():
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    x[1] = -np.inf
    g, _ = _expanded("softmax", [x], {"dim": 1, "safe": True})
    got = build(g, target="llvm")(x)
    assert (got[1] == 0).all() and np.allclose(got[[0, 2]].sum(1), 1.0)


def test_integer_max_pool_and_scatter_targets_unchanged():
    x = np.random.default_rng(2).integers(-50, 50, (1, 2, 7, 7)).astype(np.int32)
    attrs = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}
    g, _ = _expanded("max_pool2d", [x], attrs)
    assert_close_np(build(g, target="llvm")(x), all_ops()["max_pool2d"].reference(x, **attrs))
    b = Builder()
    b.graph.outputs = list(b.graph.call("softmax", [b.graph.input((2, 3), "float32")], dim=1))
    assert [n.op for n in expand_opaque(b.graph, PassContext(HOST)).nodes] == ["softmax"]
