"""Graph passes, each on a `before` graph checked against what it must become."""
import numpy as np
import pytest

from fxc.errors import IndexOutOfRangeError
from fxc.relay_like.builder import Builder
from fxc.relay_like.context import PassContext
from fxc.relay_like.graph import Graph
from fxc.relay_like.passes import (
    eliminate_common_subexpr,
    eliminate_dead_code,
    fold_constants,
    materialize_outputs,
    simplify,
)
from fxc.relay_like.passes.fuse_ops import fuse_ops
from fxc.relay_like.passes.plan_memory import plan_memory

CTX = PassContext()     # the host CPU, fp32, the build's default choices


def ops(g):
    return [n.op for n in g.nodes]


def test_eliminate_dead_code():
    b = Builder()
    x = b.graph.input((3,), "float32")
    b.call("exp", [x])                      # unused
    b.graph.outputs = [b.call("relu", [x])]
    assert ops(eliminate_dead_code(b.graph, CTX)) == ["relu"]


def test_eliminate_common_subexpr():
    b = Builder()
    x = b.graph.input((3,), "float32")
    a1, a2 = b.call("exp", [x]), b.call("exp", [x])
    b.graph.outputs = [b.call("add", [a1, a2])]
    g = eliminate_common_subexpr(b.graph, CTX)
    assert ops(g) == ["exp", "add"]
    assert g.nodes[1].inputs[0] is g.nodes[1].inputs[1]


def test_fold_constants_only_over_true_constants():
    b = Builder()
    w = b.graph.input((3,), "float32")     # a weight: a live input, never folded
    c = b.call("mul", [b.const(np.arange(3, dtype="float32")), 2.0])
    b.graph.outputs = [b.call("add", [w, c])]
    g = fold_constants(b.graph, CTX)
    assert ops(g) == ["add"]
    np.testing.assert_array_equal(g.nodes[0].inputs[1].data, [0, 2, 4])


def test_simplify_removes_noops():
    b = Builder()
    x = b.graph.input((2, 3), "float32")
    y = b.call("reshape", [b.call("cast", [x], dtype="float32")], shape=(2, 3))
    b.graph.outputs = [b.call("relu", [y])]
    g = simplify(b.graph, CTX)
    assert ops(g) == ["relu"] and g.nodes[0].inputs[0] is x


def test_simplify_runs_elementwise_ops_before_reshapes():
    b = Builder()
    x = b.graph.input((8, 6), "float32")
    mask = b.graph.input((1, 1, 6), "float32")
    r = b.call("reshape", [x], shape=(1, 8, 6))
    y = b.call("add", [b.call("mul", [b.call("gelu", [r]), 2.0]), mask])    # scalar, then broadcast operand
    b.graph.outputs = [b.call("reshape", [y], shape=(8, 6))]
    g = eliminate_dead_code(simplify(b.graph, CTX), CTX)
    # gelu, mul and add now run at x's shape; the mask loses its extra leading 1; both reshapes cancel
    assert ops(g) == ["gelu", "mul", "reshape", "add"]
    assert g.nodes[0].inputs[0] is x and g.outputs[0] is g.nodes[-1].outputs[0]
    assert g.nodes[2].outputs[0].shape == (1, 6) and g.outputs[0].shape == (8, 6)


def test_simplify_keeps_reshapes_that_must_stay():
    b = Builder()
    x = b.graph.input((8, 6), "float32")
    other = b.graph.input((2, 6), "float32")
    r = b.call("reshape", [x], shape=(4, 2, 6))          # not only leading 1s: only same-shape operands move
    y = b.call("add", [r, b.call("reshape", [other], shape=(1, 2, 6))])
    used_twice = b.call("reshape", [x], shape=(2, 4, 6))
    b.graph.outputs = [y, b.call("exp", [used_twice]), used_twice]
    g = simplify(b.graph, CTX)
    assert ops(g) == ["reshape", "reshape", "add", "reshape", "exp"]


def test_simplify_counts_readers_a_removed_noop_hands_over():
    b = Builder()
    x = b.graph.input((2, 3), "float32")
    c = b.call("cast", [b.call("reshape", [x], shape=(6,))], dtype="float32")   # a no-op with two readers
    b.graph.outputs = [b.call("exp", [c]), b.call("neg", [c])]
    g = eliminate_dead_code(simplify(b.graph, CTX), CTX)
    produced = {id(n) for n in g.nodes}
    assert all(v.node is None or id(v.node) in produced for n in g.nodes for v in n.inputs)
    assert ops(g) == ["reshape", "exp", "neg"]          # the reshape stays: it has two readers


def test_materialize_outputs_copies_inputs_and_duplicates():
    b = Builder()
    x = b.graph.input((2,), "float32")
    r = b.call("relu", [x])
    b.graph.outputs = [x, r, r]
    g = materialize_outputs(b.graph, CTX)
    assert ops(g) == ["relu", "copy", "copy"]
    assert len({v.id for v in g.outputs}) == 3


def test_fuse_conv_epilogue_and_injective_chains():
    b = Builder()
    x = b.graph.input((1, 3, 8, 8), "float32")
    w = b.graph.input((4, 3, 3, 3), "float32")
    bias = b.graph.input((4,), "float32")
    p = b.call("pad", [x], pad=(1, 1, 1, 1))
    c = b.call("conv2d", [p, w])
    e = b.call("relu", [b.call("add", [c, b.call("reshape", [bias], shape=(4, 1, 1))])])
    s = b.call("sum", [e], axes=(1,))
    b.graph.outputs = [b.call("exp", [s])]
    groups = fuse_ops(b.graph)
    assert [[n.op for n in gr.nodes] for gr in groups] == [
        ["pad"],                                   # conv inputs are materialised, never inlined
        ["conv2d", "reshape", "add", "relu"],      # bias + activation epilogue (reshape inlined)
        ["sum", "exp"],                            # reduction + elementwise epilogue
    ]


def test_fuse_stops_at_multiple_uses():
    b = Builder()
    x = b.graph.input((4,), "float32")
    e = b.call("exp", [x])
    b.graph.outputs = [b.call("add", [e, 1.0]), b.call("mul", [e, 2.0])]
    groups = fuse_ops(b.graph)
    assert [[n.op for n in gr.nodes] for gr in groups] == [["exp"], ["add"], ["mul"]]


def test_plan_memory_shares_dead_buffers():
    b = Builder()
    x = b.graph.input((1024,), "float32")
    a = b.call("exp", [x])
    bb = b.call("sum", [a], axes=(0,), keepdim=True)     # a dies here
    c = b.call("add", [x, bb])
    d = b.call("sum", [c], axes=(0,), keepdim=True)      # c dies here
    b.graph.outputs = [b.call("mul", [x, d])]
    groups = fuse_ops(b.graph, enable=False)
    plan = plan_memory(groups, b.graph.outputs)
    assert plan.total_bytes == 2 * 4096 + 2 * 4
    assert plan.workspace_bytes < plan.total_bytes
    assert plan.offsets[a.id] == plan.offsets[c.id]       # same storage, lifetimes do not overlap


def test_reshape_groups_are_views_that_keep_their_source_alive():
    from fxc.driver.build import build
    from fxc.relay_like.passes.plan_memory import reshape_views
    b = Builder()
    x = b.graph.input((64, 32), "float32")
    y = b.graph.input((32, 64), "float32")
    a = b.call("exp", [x])
    v = b.call("reshape", [a], shape=(32, 64))            # read twice: a group of its own, so a view of a
    c = b.call("sin", [y])                               # could reuse a's storage if the view did not keep a alive
    b.graph.outputs = [b.call("neg", [a]), b.call("add", [v, c]), b.call("mul", [v, c])]
    groups = fuse_ops(b.graph)
    views = reshape_views(groups, {o.id for o in b.graph.outputs})
    assert {vid: src.id for vid, src in views.items()} == {v.id: a.id}
    main = [gr for gr in groups if gr.outputs[0].id not in views]
    plan = plan_memory(main, b.graph.outputs, views)
    assert plan.offsets[a.id] != plan.offsets[c.id]
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal((64, 32), "float32"), rng.standard_normal((32, 64), "float32")
    module = build(b.graph)
    assert not any(k.split(": ")[1].startswith("reshape ->") for k in module.kernels)
    n, s, m = module(xs, ys)
    ea, sy = np.exp(xs).reshape(32, 64), np.sin(ys)
    np.testing.assert_allclose(n, -np.exp(xs), rtol=1e-6)
    np.testing.assert_allclose(s, ea + sy, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m, ea * sy, rtol=1e-5, atol=1e-5)


def test_hoisted_values_stop_at_activations_and_broadcasts():
    """passes/hoist.py: values computed from weights and constants only are hoisted; anything reading an
    activation is not, nor a broadcast that would store a weight at activation size."""
    from fxc.relay_like.passes.hoist import hoisted_values
    g = Graph()
    x = g.input((4, 8), "float32", "x")
    var = g.input((8,), "float32", "var")
    g.weights.add(var.id)
    inv = g.call1("rsqrt", [g.call1("add", [var, g.const(np.float32(1e-5))])])
    big = g.call1("expand", [inv], size=(4, 8))
    y = g.call1("mul", [x, inv])
    g.outputs = [g.call1("add", [y, big])]
    h = hoisted_values(g)
    assert inv.id in h and inv.node.inputs[0].id in h
    assert big.id not in h and y.id not in h and var.id not in h


def _conv_bn_graph(groups=1, reread=False, bias=False):
    """x -> conv2d(x, w) [-> add(., bias)] -> mul(., scale) -> add(., shift), scale and shift from weights (an
    inference batch norm). Inputs: x, w, gamma, var, shift[, bias]."""
    g = Graph()
    x = g.input((1, 4, 6, 6), "float32", "x")
    w = g.input((8, 4 // groups, 3, 3), "float32", "w")
    gamma = g.input((8,), "float32", "gamma")
    var = g.input((8,), "float32", "var")
    shift = g.input((8, 1, 1), "float32", "shift")
    g.weights |= {w.id, gamma.id, var.id, shift.id}
    scale = g.call1("reshape",
                    [g.call1("mul", [g.call1("rsqrt", [g.call1("add", [var, g.const(np.float32(1e-5))])]), gamma])],
                    shape=(8, 1, 1))
    c = g.call1("conv2d", [x, w], stride=(1, 1), dilation=(1, 1), groups=groups)
    if bias:
        b = g.input((8, 1, 1), "float32", "bias")
        g.weights.add(b.id)
        c = g.call1("add", [c, b])
    y = g.call1("add", [g.call1("mul", [c, scale]), shift])
    g.outputs = [y, c] if reread else [y]
    return g


def test_fold_scale_axis_moves_a_channel_scale_into_the_weight():
    import torch

    from fxc.driver.build import build
    from fxc.relay_like.passes import fold_scale_axis, infer_types
    for groups, bias in ((1, False), (4, False), (1, True), (4, True)):
        g = fold_scale_axis(infer_types(_conv_bn_graph(groups, bias=bias), CTX), CTX)
        conv = next(n for n in g.nodes if n.op == "conv2d")
        assert conv.inputs[1].node.op == "mul", "the conv reads the scaled weight"
        readers = [n for n in g.nodes if conv.outputs[0] in n.inputs]
        assert [n.op for n in readers] == ["add"] and not any(n.op == "mul" and readers[0].outputs[0] in n.inputs
                                                              for n in g.nodes), "no multiply left after the conv"
        if bias:
            assert readers[0].inputs[1].node.op == "mul", "the bias is scaled too"
        # numerically: against numpy, and again after the scale's inputs change (the prepack is redone)
        rng = np.random.default_rng(groups)
        module = build(_conv_bn_graph(groups, bias=bias))
        x = rng.standard_normal((1, 4, 6, 6), dtype=np.float32)
        w = rng.standard_normal((8, 4 // groups, 3, 3), dtype=np.float32)
        shift, b = rng.standard_normal((8, 1, 1), dtype=np.float32), rng.standard_normal((8, 1, 1), dtype=np.float32)
        for gamma in (rng.standard_normal(8, dtype=np.float32), np.full(8, 3.0, np.float32)):
            var = rng.random(8, dtype=np.float32) + 0.5
            ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), groups=groups).numpy()
            ref = ((ref + b) if bias else ref) * (gamma / np.sqrt(var + 1e-5)).reshape(8, 1, 1) + shift
            got = module(x, w, gamma, var, shift, *([b] if bias else []))
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_fold_scale_axis_leaves_a_conv_read_elsewhere():
    from fxc.relay_like.passes import fold_scale_axis, infer_types
    for bias in (False, True):      # the conv's result (or conv + bias) is also a graph output: nothing folds
        g = fold_scale_axis(infer_types(_conv_bn_graph(reread=True, bias=bias), CTX), CTX)
        assert [n.op for n in g.nodes].count("mul") == 2    # the scale's own mul and the one after the conv
        conv = next(n for n in g.nodes if n.op == "conv2d")
        assert conv.inputs[1].name == "w"


def test_frozen_batch_normed_conv_packs_its_weight_at_compile_time():
    """fxc.from_torch bakes the weights in: a batch norm folded into a large conv weight (mul(w, scale), more than
    fold_constants' broadcast limit of elements) and its packing are folded at compile time, not redone per call
    (which once made ResNet-18 from_torch 40% slower)."""
    import torch

    import fxc
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(128, 1024, 3, bias=False), torch.nn.BatchNorm2d(1024)).eval()
    with torch.no_grad():
        net[1].running_var.uniform_(0.5, 2.0)
        x = torch.randn(1, 128, 5, 5)
        compiled = fxc.from_torch(net, (x,))
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-4, atol=1e-4)
    groups = [k.split(": ", 1)[1] for k in compiled.module.kernels]
    assert not any("pack_lanes" in k or "winograd_weight" in k or k.startswith("mul") for k in groups), groups


def test_constant_indices_in_range_are_wrapped_and_loaded_unclamped():
    """fold_constants: an index whose index tensors are constants within [-size, size) gets its negative entries
    wrapped and is marked in_range (its kernel skips the per-element wrap and clamp); one with an entry out of
    range keeps the checked gather, which raises as eager does (IndexOutOfRangeError naming the index)."""
    from fxc.driver.build import build
    b = Builder()
    x = b.graph.input((4, 6), "float32")
    fine = b.call("index", [x, b.const(np.array([[5, -1], [0, -6]]))], dims=(1,))
    wild = b.call("index", [x, b.const(np.array([1, 6]))], dims=(1,))
    b.graph.outputs = [fine, wild]
    g = fold_constants(b.graph, CTX)
    fine_node, wild_node = (v.node for v in g.outputs)
    assert fine_node.attrs.get("in_range") and not wild_node.attrs.get("in_range")
    np.testing.assert_array_equal(fine_node.inputs[1].data, [[5, 5], [0, 0]])
    a = np.random.default_rng(0).standard_normal((4, 6)).astype("float32")
    np.testing.assert_array_equal(build(_index_graph([[5, -1], [0, -6]]))(a), a[:, [[5, -1], [0, -6]]])
    with pytest.raises(IndexOutOfRangeError, match="index 6 is out of range"):
        build(_index_graph([1, 6]))(a)


def _index_graph(indices):
    """x[:, indices] over a [4, 6] input, the indices a constant, folded."""
    b = Builder()
    x = b.graph.input((4, 6), "float32")
    b.graph.outputs = [b.call("index", [x, b.const(np.array(indices))], dims=(1,))]
    return fold_constants(b.graph, CTX)


def _weighted_conv_graph():
    """relu(conv2d(x, w)) + 1, w a weight (a graph input that changes rarely), then reshaped to the output."""
    b = Builder()
    x = b.graph.input((1, 8, 10, 10), "float32", "x")
    w = b.graph.input((16, 8, 3, 3), "float32", "w")
    b.graph.weights.add(w.id)
    y = b.call("add", [b.call("relu", [b.call("conv2d", [x, w])]), 1.0])
    b.graph.outputs = [b.call("reshape", [y], shape=(16, 64))]
    return b.graph


def test_every_pass_runs_for_every_target_and_leaves_what_is_not_its_own():
    """The pipeline has no per-target list: on a device target the CPU passes (Winograd, packing, blocked layout,
    bf16) return the graph as it was, and on the host they rewrite the conv."""
    from fxc.relay_like.pipeline import run_passes
    from fxc.target import Target
    assert "conv2d_packed" in ops(run_passes(_weighted_conv_graph(), CTX))
    device = ops(run_passes(_weighted_conv_graph(), PassContext(Target.parse("opengl"))))
    assert "conv2d" in device and not any(op.startswith(("conv2d_", "pack_", "winograd")) for op in device)


def test_plan_steps_split_the_prepack_and_plan_the_per_call_buffers():
    """hoist_weights, fuse_groups, split_prepack, plan_buffers: the weight's packing is the prepack step, the conv
    with its epilogue a per-call group writing straight into the output its reshape makes; with Caps.hoist_weights off
    (webgl) nothing is hoisted."""
    import dataclasses

    from fxc.relay_like.pipeline import plan_graph, run_passes
    from fxc.target import Caps, Target
    g = run_passes(_weighted_conv_graph(), PassContext(winograd="off"))
    p = plan_graph(g, PassContext(winograd="off"))
    assert [gr.root.op for gr in p.prepack] == ["pack_lanes"]
    assert [gr.root.op for gr in p.main] == ["add"] and p.main[0].nodes[0].op == "conv2d_packed"
    assert set(p.into_out.values()) == {0} and not p.views
    assert p.memory is not None and not p.memory.offsets     # the only intermediate is written into the output
    assert sum(len(gr.nodes) for gr in p.groups) == len(g.nodes)
    webgl = Target("webgl", (), dataclasses.replace(Caps(), scatter=False, hoist_weights=False))
    assert not plan_graph(g, PassContext(webgl)).prepack
