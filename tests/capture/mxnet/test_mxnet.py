"""fxc.from_mxnet: every form of symbol and params, NDArray and numpy calls, shapes from the first call, export,
the Gluon wrapper, the converter table on a model of many ops, unknown ops and the CLI, each against MXNet."""
import subprocess
import sys

import numpy as np
import pytest

import fxc
from fxc.errors import FxcError, InputError, UnsupportedOpError
from fxc.testing.mxnet_zoo import import_mxnet

mx = import_mxnet()
SHAPE = (2, 3, 10, 10)


def small_net():
    """conv + BN + relu + max pool + FC + softmax: (symbol, arg params, aux params) with random values."""
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=6, name="conv0")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn0")
    x = mx.sym.Activation(x, act_type="relu", name="relu0")
    x = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full", name="pool0")
    x = mx.sym.FullyConnected(x, num_hidden=5, name="fc0")
    sym = mx.sym.softmax(x, name="prob")
    arg_shapes, _, aux_shapes = sym.infer_shape(data=SHAPE)
    rng = np.random.RandomState(0)
    args = {n: mx.nd.array(rng.randn(*s).astype(np.float32) * 0.3)
            for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    aux = {n: mx.nd.array(rng.rand(*s).astype(np.float32) + 0.5)
           for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return sym, args, aux


def mxnet_forward(sym, args, aux, **inputs):
    ex = sym.bind(mx.cpu(), {**{k: mx.nd.array(v) for k, v in inputs.items()}, **args}, aux_states=aux)
    return [o.asnumpy() for o in ex.forward()]


def data(shape=SHAPE, seed=1):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def close(a, b, tol=1e-5):
    a = a.asnumpy() if hasattr(a, "asnumpy") else a
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max())))


def test_symbol_and_arg_aux_dict_ndarray_in_ndarray_out(target):
    sym, args, aux = small_net()
    x = data()
    params = {**{f"arg:{k}": v for k, v in args.items()}, **{f"aux:{k}": v for k, v in aux.items()}}
    m = fxc.from_mxnet(sym, params, shapes={"data": SHAPE}, target=target)
    out = m(mx.nd.array(x))
    assert isinstance(out, mx.nd.NDArray)
    close(out, mxnet_forward(sym, args, aux, data=x)[0])
    assert m.input_names == ["data"] and m.inputs[0].shape == SHAPE


def test_json_text_and_file_tuple_params_numpy_in_numpy_out(tmp_path, target):
    sym, args, aux = small_net()
    x = data()
    ref = mxnet_forward(sym, args, aux, data=x)[0]
    pair = ({k: v.asnumpy() for k, v in args.items()}, {k: v.asnumpy() for k, v in aux.items()})
    out = fxc.from_mxnet(sym.tojson(), pair, shapes=SHAPE, target=target)(x)
    assert isinstance(out, np.ndarray)
    close(out, ref)
    sym.save(str(tmp_path / "net.json"))
    close(fxc.from_mxnet(tmp_path / "net.json", {**args, **aux}, shapes={"data": SHAPE}, target=target)(x), ref)


def test_checkpoint_prefix_with_epoch_and_shapes_from_first_call(tmp_path, target):
    sym, args, aux = small_net()
    x = data()
    mx.model.save_checkpoint(str(tmp_path / "net"), 3, sym, args, aux)
    m = fxc.from_mxnet(str(tmp_path / "net"), epoch=3, target=target)
    with pytest.raises(FxcError, match="first call"):
        _ = m.module
    close(m(data=x), mxnet_forward(sym, args, aux, data=x)[0])
    assert m.module.inputs[0].shape == SHAPE
    with pytest.raises(InputError):
        m(data((1, 3, 10, 10)))                 # compiled for the first call's shape
    with pytest.raises(FxcError, match="epoch"):
        fxc.from_mxnet(str(tmp_path / "net"), epoch=4)


def test_export_and_load(tmp_path, target):
    sym, args, aux = small_net()
    x = data()
    m = fxc.from_mxnet(sym, (args, aux), shapes={"data": SHAPE}, target=target)
    path = fxc.export(m, tmp_path / "net.fxc")
    close(fxc.load(path)(x), mxnet_forward(sym, args, aux, data=x)[0])


def test_gluon_wrapper_drops_into_gluon_code(target):
    from mxnet.gluon import nn

    import fxc.mxnet
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.GlobalAvgPool2D(), nn.Dense(3))
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(data())
    net(x)
    net[1].running_var.set_data(mx.nd.array(np.linspace(0.5, 1.5, 4, dtype=np.float32)))
    ref = net(x).asnumpy()
    block = fxc.mxnet.compile(net, x, target=target)
    assert isinstance(block, mx.gluon.HybridBlock)
    close(block(x), ref)
    outer = nn.HybridSequential()
    outer.add(block, nn.Activation("sigmoid"))
    close(outer(x), 1 / (1 + np.exp(-ref)))


def test_many_ops_and_several_outputs(target):
    """Elementwise/broadcast/scalar ops, Reshape's special codes, transpose, slicing, concat, reductions,
    activations, LeakyReLU forms, Deconvolution, avg/sum pooling and two outputs, against MXNet."""
    a, b = mx.sym.var("a"), mx.sym.var("b")
    y = mx.sym.broadcast_mul(a, b) + 2.0 * a - mx.sym.relu(a) / 3.0
    y = mx.sym.LeakyReLU(y, act_type="leaky", slope=0.1)
    y = mx.sym.concat(y, mx.sym.tanh(a), mx.sym.LeakyReLU(a, act_type="elu", slope=0.5), dim=1)
    y = mx.sym.Pooling(y, kernel=(2, 2), stride=(1, 1), pad=(1, 1), pool_type="avg", count_include_pad=False)
    y = mx.sym.Deconvolution(y, kernel=(2, 2), stride=(2, 2), num_filter=2, no_bias=False, name="deconv")
    z = mx.sym.reshape(y, shape=(0, -3, -1))
    z = mx.sym.transpose(z, axes=(1, 0, 2))
    z = mx.sym.slice_axis(z, axis=2, begin=1, end=-1)
    z = mx.sym.softmax(mx.sym.mean(z, axis=2, keepdims=True) + mx.sym.max(z, axis=2, keepdims=True), axis=0)
    w = mx.sym.sum(mx.sym.clip(mx.sym.sigmoid(y), 0.2, 0.8), axis=(2, 3))
    w = mx.sym.broadcast_add(w, mx.sym.mean(mx.sym.rsqrt(mx.sym.exp(mx.sym.abs(a))), axis=(1, 2, 3), keepdims=False)
                             .reshape((2, 1)))
    sym = mx.sym.Group([z, w])
    shapes = {"a": (2, 3, 4, 4), "b": (1, 3, 1, 4)}
    rng = np.random.RandomState(2)
    arg_shapes = dict(zip(sym.list_arguments(), sym.infer_shape(**shapes)[0]))
    params = {k: mx.nd.array(rng.randn(*s).astype(np.float32)) for k, s in arg_shapes.items() if k not in shapes}
    ins = {k: rng.randn(*s).astype(np.float32) for k, s in shapes.items()}
    refs = mxnet_forward(sym, params, {}, **ins)
    outs = fxc.from_mxnet(sym, params, shapes=shapes, target=target)(ins["a"], ins["b"])
    assert isinstance(outs, list) and len(outs) == 2
    for o, r in zip(outs, refs):
        close(o, r)


def test_unknown_ops_listed_by_name_and_node():
    x = mx.sym.var("data")
    x = mx.sym.LRN(mx.sym.Convolution(x, kernel=(1, 1), num_filter=2, name="c"), nsize=3, name="lrn_a")
    sym = mx.sym.topk(mx.sym.LRN(x, nsize=3, name="lrn_b"), k=1, name="top")
    with pytest.raises(UnsupportedOpError) as e:
        fxc.from_mxnet(sym, None)
    for part in ("LRN (node 'lrn_a')", "LRN (node 'lrn_b')", "topk (node 'top')", "3 node(s)"):
        assert part in str(e.value)


def test_cli_compiles_a_checkpoint(tmp_path):
    sym, args, aux = small_net()
    mx.model.save_checkpoint(str(tmp_path / "net"), 2, sym, args, aux)
    x = data()
    np.save(tmp_path / "x.npy", x)
    run = [sys.executable, "-m", "fxc.cli"]
    p = subprocess.run(run + ["compile", str(tmp_path / "net"), "--epoch", "2", "--input-shape",
                              ",".join(map(str, SHAPE)), "-o", str(tmp_path / "net.fxc")],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    p = subprocess.run(run + ["run", str(tmp_path / "net.fxc"), "--input", str(tmp_path / "x.npy"), "-o",
                              str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    close(np.load(tmp_path / "y.npy"), mxnet_forward(sym, args, aux, data=x)[0])
    p = subprocess.run(run + ["compile", str(tmp_path / "net"), "--epoch", "7", "--input-shape", "1,3,10,10",
                              "-o", str(tmp_path / "bad.fxc")],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 1 and "ModelFileError" in p.stderr and "epoch 7" in p.stderr
    assert not (tmp_path / "bad.fxc").exists()


def test_more_ops_and_a_label_input(target):
    """1-d conv, Pad, slice, LayerNorm, PReLU, dot/batch_dot, Cast and SoftmaxOutput (its label is not an input)."""
    a, v = mx.sym.var("a"), mx.sym.var("v")
    c = mx.sym.Convolution(v, kernel=(3,), num_filter=4, pad=(1,), stride=(2,), name="c1d")
    c = mx.sym.LeakyReLU(c, act_type="prelu", name="prelu")
    c = mx.sym.LayerNorm(mx.sym.Cast(c, dtype="float32"), axis=-1, name="ln")
    p = mx.sym.Pad(a, mode="reflect", pad_width=(0, 0, 0, 0, 1, 2, 2, 1))
    p = mx.sym.slice(p, begin=(None, 1, 1, 0), end=(None, 3, -1, None))
    d = mx.sym.batch_dot(mx.sym.reshape(p, shape=(0, -1, 5)), mx.sym.reshape(p, shape=(0, -1, 5)), transpose_b=True)
    d = mx.sym.dot(mx.sym.reshape(d, shape=(-1, 4)), mx.sym.var("m"))
    out = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(c, num_hidden=3, name="fc"), name="softmax")
    sym = mx.sym.Group([out, d])
    shapes = {"a": (2, 3, 4, 5), "v": (2, 2, 9), "m": (4, 3)}
    rng = np.random.RandomState(3)
    arg_shapes = dict(zip(sym.list_arguments(), sym.infer_shape(**shapes)[0]))
    params = {k: mx.nd.array(rng.rand(*s).astype(np.float32)) for k, s in arg_shapes.items()
              if k not in shapes and k != "softmax_label"}
    ins = {k: rng.randn(*s).astype(np.float32) for k, s in shapes.items()}
    refs = mxnet_forward(sym, params, {}, softmax_label=np.zeros(arg_shapes["softmax_label"], np.float32), **ins)
    m = fxc.from_mxnet(sym, params, shapes=shapes, target=target)
    assert m.input_names == ["v", "a", "m"]
    for o, r in zip(m(ins["v"], ins["a"], ins["m"]), refs):
        close(o, r)


def test_float64_inputs_cast_params_as_mxnet_does(target):
    sym, args, aux = small_net()
    x = data().astype(np.float64)
    m = fxc.from_mxnet(sym, (args, aux), shapes={"data": SHAPE}, dtype="float64", target=target)
    out = m(x)
    assert out.dtype == np.float64
    ex = sym.simple_bind(mx.cpu(), data=SHAPE, type_dict={"data": np.float64})
    for k, v in {**args, **aux}.items():
        (ex.arg_dict if k in ex.arg_dict else ex.aux_dict)[k][:] = v.astype(np.float64)
    ex.arg_dict["data"][:] = x
    close(out, ex.forward()[0].asnumpy(), tol=1e-9)
    with pytest.raises(InputError):
        m(x.astype(np.float32))


def test_full_reductions_keep_mxnet_shape(target):
    a = mx.sym.var("a")
    sym = mx.sym.sum(a) * 2 + mx.sym.max(a, axis=1).sum()          # MXNet's full reductions have shape (1,)
    x = data((3, 4))
    out = fxc.from_mxnet(sym, None, shapes={"a": (3, 4)}, target=target)(x)
    assert out.shape == (1,)
    close(out, mxnet_forward(sym, {}, {}, a=x)[0])
