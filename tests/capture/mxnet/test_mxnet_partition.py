"""fxc's MXNet partitioner: `sym.optimize_for("fxc", args, aux)` and `block.optimize_for(x, backend="fxc")` hand
the ops fxc supports to fxc-compiled subgraphs, leave the others (LRN, topk here) to MXNet, and match MXNet."""
import json

import numpy as np

import fxc.mxnet
from fxc.testing.mxnet_zoo import make_gluon

from .test_mxnet import close, mx


def _ops(sym) -> list:
    return [n["op"] for n in json.loads(sym.tojson())["nodes"] if n["op"] != "null"]


def mixed_net():
    """conv + BN + relu | LRN (MXNet) | conv + FC (fxc): two subgraphs around an op fxc lacks."""
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv0")
    x = mx.sym.Activation(mx.sym.BatchNorm(x, fix_gamma=False, name="bn0"), act_type="relu", name="relu0")
    x = mx.sym.LRN(x, nsize=3, name="lrn0")
    x = mx.sym.Convolution(x, kernel=(1, 1), num_filter=4, name="conv1")
    sym = mx.sym.FullyConnected(x, num_hidden=5, name="fc0")
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(2, 3, 8, 8))
    rng = np.random.RandomState(0)
    args = {k: mx.nd.array(rng.randn(*s).astype(np.float32)) for k, s in zip(sym.list_arguments(), arg_shapes)
            if k != "data"}
    aux = {k: mx.nd.array(rng.rand(*s).astype(np.float32) + 0.5)
           for k, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return sym, args, aux


def test_symbol_optimize_for_mixes_fxc_and_mxnet():
    assert fxc.mxnet.library_path().is_file()
    sym, args, aux = mixed_net()
    x = mx.nd.array(np.random.RandomState(1).randn(2, 3, 8, 8).astype(np.float32))
    ref = sym.bind(mx.cpu(), {"data": x, **args}, aux_states=aux).forward()[0].asnumpy()
    part = sym.optimize_for("fxc", args, aux)
    assert _ops(part) == ["_fxc_subgraph", "LRN", "_fxc_subgraph"]
    out = part.bind(mx.cpu(), {"data": x, **args}, aux_states=aux).forward()[0]
    close(out, ref)
    # freeze=False: the weights stay inputs of the compiled subgraphs, so other weights at bind time are seen
    other = {k: v * 0.5 for k, v in args.items()}
    ref2 = sym.bind(mx.cpu(), {"data": x, **other}, aux_states=aux).forward()[0].asnumpy()
    live = sym.optimize_for("fxc", args, aux, freeze="False")
    close(live.bind(mx.cpu(), {"data": x, **other}, aux_states=aux).forward()[0], ref2)


def test_gluon_block_optimize_for_matches_mxnet():
    net, x = make_gluon("resnet18_v1", 32)
    ref = net(x).asnumpy()
    net.hybridize()
    net.optimize_for(x, backend="fxc")
    close(net(x), ref, tol=1e-4)
    assert _ops(net._cached_graph[1]) == ["_fxc_subgraph"]       # every op of ResNet-18 is fxc's


def test_unsupported_tail_stays_in_mxnet():
    x = mx.sym.var("data")
    y = mx.sym.topk(mx.sym.relu(mx.sym.FullyConnected(x, num_hidden=6, name="fc")), k=2, ret_typ="value", name="tk")
    w, b = mx.nd.array(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4)), mx.nd.array(np.ones(6, np.float32))
    d = mx.nd.array(np.random.RandomState(2).randn(3, 4).astype(np.float32))
    ref = y.bind(mx.cpu(), {"data": d, "fc_weight": w, "fc_bias": b}).forward()[0].asnumpy()
    part = y.optimize_for("fxc", {"data": d, "fc_weight": w, "fc_bias": b}, {})
    assert _ops(part) == ["_fxc_subgraph", "topk"]
    close(part.bind(mx.cpu(), {"data": d, "fc_weight": w, "fc_bias": b}).forward()[0], ref)


def test_attributes_fxc_lacks_stay_in_mxnet_without_shapes():
    """Without input shapes, fxc selects by op and attributes: an lp pooling and a 3-d kernel stay with MXNet."""
    x = mx.sym.var("data")
    y = mx.sym.Pooling(mx.sym.relu(x), kernel=(2, 2), pool_type="lp", p_value=2, name="lp")
    y = mx.sym.relu(mx.sym.Convolution(y, kernel=(1, 1, 1), num_filter=2, no_bias=True, name="c3d"))
    w = mx.nd.array(np.ones((2, 3, 1, 1, 1), np.float32))
    part = mx.sym.relu(y).optimize_for("fxc", {"c3d_weight": w}, {})
    assert _ops(part) == ["_fxc_subgraph", "Pooling", "Convolution", "_fxc_subgraph"]
