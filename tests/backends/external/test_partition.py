"""BYOC's partition step without a device: -libs= parsing, CLBlast's pattern checks at their edges (batch 2, int64,
broadcast batch dims, symbolic sizes), partition counts, region merging (and its refusal where a dependency would
leave a region and re-enter), and the reason recorded for every op."""
import numpy as np
import pytest

from fxc.backends import libraries_of
from fxc.errors import TargetError
from fxc.relay_like.context import PassContext
from fxc.relay_like.graph import Graph
from fxc.relay_like.pipeline import plan_graph, run_passes
from fxc.symbolic.sym import Sym
from fxc.target import Target

CLBLAST = Target.parse("opencl -libs=clblast")


def _planned(g, offload="always"):
    ctx = PassContext(CLBLAST, libraries=libraries_of(CLBLAST), offload=offload)
    return plan_graph(run_passes(g, ctx), ctx)


def _w(*shape):
    return Graph.const(np.random.default_rng(0).random(shape, dtype=np.float32))


def _one_matmul(a_shape, b_shape, dtype="float32", **attrs):
    g = Graph()
    a, b = g.input(a_shape, dtype, "a"), g.input(b_shape, dtype, "b")
    g.outputs = [g.call1("relu", [g.call1("matmul", [a, b], **attrs)])]
    return g


def test_libs_are_parsed_as_data_and_checked_against_the_registry():
    assert CLBLAST.libs == ("clblast",) and Target.parse("opencl").libs == ()
    assert str(CLBLAST) == "opencl -libs=clblast"
    with pytest.raises(TargetError, match="library names separated by commas"):
        Target.parse("opencl -libs=clblast;rm")
    with pytest.raises(TargetError, match="unknown library -libs=cublas; known: clblast"):
        libraries_of(Target.parse("opencl -libs=cublas"))
    with pytest.raises(TargetError, match="clblast runs on opencl targets, not llvm"):
        libraries_of(Target.parse("llvm -libs=clblast"))


@pytest.mark.parametrize("a_shape, b_shape, dtype, attrs, why", [
    ((2, 4, 8), (2, 8, 3), "float32", {}, None),                      # batch 2: one strided batched GEMM
    ((2, 4, 8), (8, 3), "float32", {}, None),                         # a batch over one B: 8 rows of one GEMM
    ((2, 4, 8), (2, 3, 8), "float32", {"trans_b": True}, None),
    ((4, 8), (8, 3), "int64", {}, "int64 operands: CLBlast is called for float32 GEMM"),
    ((2, 4, 8), (1, 8, 3), "float32", {}, "broadcast batch dims (2,) x (1,)"),
    ((4, 8), (2, 8, 3), "float32", {}, "broadcast batch dims () x (2,)"),
    ((2, 8, 4), (8, 3), "float32", {"trans_a": True}, "a transposed batch of A over one B"),
], ids=["batch2", "batch_over_2d", "trans_b", "int64", "broadcast", "a_2d", "trans_a_batch"])
def test_pattern_checks_at_their_edges(a_shape, b_shape, dtype, attrs, why):
    p = _planned(_one_matmul(a_shape, b_shape, dtype, **attrs))
    (mm,) = [n for n in p.graph.nodes if n.op == "matmul"]
    (relu,) = [n for n in p.graph.nodes if n.op == "relu"]
    assert p.offload_notes[relu.name] == "no pattern of clblast matches relu"
    if why is None:
        assert [[ns[-1] for _, ns in r.matches] for r in p.regions] == [[mm]]
        assert p.offload_notes[mm.name] == "clblast/gemm: offloaded (offload='always')"
        assert [gr.nodes for gr in p.groups if mm in gr.nodes] == [[mm]]      # the epilogue stays fxc's
    else:
        assert p.regions == () and why in p.offload_notes[mm.name]


def test_symbolic_batch_is_left_to_fxc():
    g = Graph()
    a, b = g.input((Sym("n"), 8), "float32", "a"), g.input((8, 3), "float32", "b")
    g.outputs = [g.call1("matmul", [a, b])]
    p = _planned(g)
    assert p.regions == () and "symbolic sizes" in next(iter(p.offload_notes.values()))


def test_adjacent_matches_merge_into_one_region():
    g = Graph()
    x = g.input((4, 16), "float32", "x")
    y = g.call1("matmul", [g.call1("matmul", [x, _w(16, 8)]), _w(8, 8)])      # GEMM straight into GEMM
    z = g.call1("matmul", [g.call1("relu", [y]), _w(8, 2)])                  # an fxc op between
    g.outputs = [z]
    p = _planned(g)
    assert [len(r.matches) for r in p.regions] == [2, 1] and {r.library for r in p.regions} == {"clblast"}
    assert sum(gr.root.op == "matmul" for gr in p.groups) == 3


def test_no_merge_where_a_dependency_leaves_and_reenters():
    """m2 reads m1 directly and through relu(m1): one region {m1, m2} would hand m1 to fxc and take relu's result
    back, so they stay two regions."""
    g = Graph()
    x = g.input((4, 4), "float32", "x")
    m1 = g.call1("matmul", [x, _w(4, 4)])
    g.outputs = [g.call1("matmul", [m1, g.call1("relu", [m1])])]
    p = _planned(g)
    assert [len(r.matches) for r in p.regions] == [1, 1]


def test_every_node_has_a_reason_and_no_libs_changes_nothing():
    g = _one_matmul((2, 4, 8), (2, 8, 3))
    p = _planned(g)
    assert set(p.offload_notes) == {n.name for n in p.graph.nodes}
    plain = PassContext(Target.parse("opencl"))
    q = plan_graph(run_passes(_one_matmul((2, 4, 8), (2, 8, 3)), plain), plain)
    assert q.regions == () and q.offload_notes == {} and len(q.groups) == 1      # matmul+relu fused as before
