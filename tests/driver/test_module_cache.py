"""The on-disk module cache (fxc/runtime/store.py, fxc/driver/build.py): a second build of the same graph, in this or
another process, loads the module instead of compiling; anything that could change the result misses."""
import json

import numpy as np
import pytest

import fxc.driver.build as fb
from fxc.relay_like.graph import Graph
from fxc.runtime.store import read_entry


def _graph(scale=2.0):
    g = Graph()
    x = g.input((3, 5), "float32", "x")
    y = g.call1("mul", [g.call1("tanh", [x]), Graph.const(np.full((5,), scale, np.float32))])
    g.outputs = [g.call1("sum", [y], axes=(1,), keepdim=False)]
    return g


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FXC_MODULE_CACHE", raising=False)
    built = []
    real = fb._build
    monkeypatch.setattr(fb, "_build", lambda *a, **k: built.append(1) or real(*a, **k))
    return tmp_path, built


def test_second_build_comes_from_the_cache(cache):
    tmp, built = cache
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    expected = (np.tanh(x) * 2).sum(1)
    a = fb.build(_graph())
    b = fb.build(_graph())                        # new Value ids, same graph
    assert len(built) == 1 and len(list((tmp / "modules").glob("*.json"))) == 1
    for m in (a, b):
        np.testing.assert_allclose(m(x), expected, rtol=1e-5)
    assert b.kernels == a.kernels and b.source == a.source      # export still has the IR


def test_other_constants_or_options_miss(cache):
    _, built = cache
    fb.build(_graph(2.0))
    fb.build(_graph(3.0))
    fb.build(_graph(2.0), fuse=False)
    assert len(built) == 3


def test_damaged_entry_is_rebuilt(cache):
    tmp, built = cache
    fb.build(_graph())
    for p in (tmp / "modules").glob("*.json"):
        p.write_bytes(p.read_bytes()[:10])
    x = np.ones((3, 5), np.float32)
    np.testing.assert_allclose(fb.build(_graph())(x), (np.tanh(x) * 2).sum(1), rtol=1e-5)
    assert len(built) == 2
    entry = next((tmp / "modules").glob("*.json"))
    meta = json.loads(read_entry(f"modules/{entry.name}"))                   # rewritten whole
    assert meta["n_consts"] >= 1


def test_replaced_op_or_switch_bypasses_the_cache(cache, monkeypatch):
    import dataclasses

    from fxc.ops import registry
    _, built = cache
    fb.build(_graph())
    op = registry.get_op("tanh")
    registry._REGISTRY["tanh"] = dataclasses.replace(op)
    try:
        fb.build(_graph())
    finally:
        registry._REGISTRY["tanh"] = op
    fb.build(_graph())                            # restored: a hit again
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    fb.build(_graph())
    assert len(built) == 3


def _dense(seed=0, n=256):
    """A graph with n x n float32 weights as constants (an ONNX model's initializers): 256 KiB at n=256."""
    w = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    g = Graph()
    x = g.input((4, n), "float32", "x")
    g.outputs = [g.call1("tanh", [g.call1("matmul", [x, Graph.const(w)])])]
    return g, w


def test_large_constants_stay_out_of_the_entry(cache, monkeypatch):
    """Issue 42 item 13: an entry keeps its constants only up to 1/32 of the cache's bound; past it, only their
    digest, and a hit recomputes them with the graph passes (no compile) and checks them; the results are right."""
    tmp, built = cache
    monkeypatch.setenv("FXC_CACHE_MAX_BYTES", str(32 * 128 * 1024))     # entries hold at most 128 KiB of constants
    g, w = _dense()
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    a = fb.build(g)
    assert not list((tmp / "modules").glob("*.npz")), "the 256 KiB of weights were written into the entry"
    size = sum(p.stat().st_size for p in (tmp / "modules").iterdir())
    assert size < 64 * 1024, size
    b = fb.build(_dense()[0])
    assert len(built) == 1                        # a hit: constants recomputed, not compiled
    for m in (a, b):
        np.testing.assert_allclose(m(x), np.tanh(x @ w), rtol=1e-4, atol=1e-5)


def test_small_constants_stay_in_the_entry(cache):
    tmp, built = cache
    fb.build(_dense(n=64)[0])
    assert len(list((tmp / "modules").glob("*.npz"))) == 1
    fb.build(_dense(n=64)[0])
    assert len(built) == 1
