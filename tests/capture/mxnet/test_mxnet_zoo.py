"""The nine Gluon model-zoo networks (random weights, randomised BatchNorm statistics) through fxc.from_mxnet,
against MXNet's own output: max abs error <= 1e-4 x the output's scale. Each at the smallest input its fixed-size
pools allow (CI-sized)."""
import numpy as np
import pytest

from fxc.testing.mxnet_zoo import GLUON_ZOO, import_mxnet, make_gluon, symbol_and_params


@pytest.mark.parametrize("name", list(GLUON_ZOO))
def test_gluon_zoo_matches_mxnet(name, target):
    import fxc
    net, x = make_gluon(name, GLUON_ZOO[name][1])
    ref = net(x).asnumpy()
    sym, params = symbol_and_params(net)
    compiled = fxc.from_mxnet(sym, params, shapes={"data": x.shape}, target=target)
    out = compiled(x)
    assert isinstance(out, import_mxnet().nd.NDArray) and out.shape == ref.shape
    scale = float(np.abs(ref).max())
    assert scale > 1e-3, "the network's output vanished: the comparison would pass trivially"
    err = float(np.abs(out.asnumpy() - ref).max())
    assert err <= 1e-4 * scale, f"{name}: max abs error {err:.3g} against output scale {scale:.3g}"


def test_small_gluon_network_on_opencl():
    """A small Gluon network (conv + BN + ReLU, a depthwise block as MobileNet's, max and global pools, dense) through
    fxc.from_mxnet on opencl against MXNet; the nine zoo networks on opencl and opengl are a documented command
    (docs/targets.md: all pass)."""
    import fxc
    from fxc.testing.mxnet_zoo import randomize_batchnorm
    mx = import_mxnet()
    from mxnet.gluon import nn
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
            nn.Conv2D(8, 3, padding=1, groups=8, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
            nn.MaxPool2D(3, 2, 1), nn.Conv2D(16, 1), nn.GlobalAvgPool2D(), nn.Dense(5))
    mx.random.seed(0)
    net.initialize(mx.init.MSRAPrelu())
    x = mx.nd.array(np.random.RandomState(0).rand(2, 3, 15, 13).astype(np.float32))
    net(x).wait_to_read()
    randomize_batchnorm(net)
    ref = net(x).asnumpy()
    sym, params = symbol_and_params(net)
    out = fxc.from_mxnet(sym, params, shapes={"data": x.shape}, target="opencl")(x).asnumpy()
    scale = float(np.abs(ref).max())
    assert scale > 1e-3 and float(np.abs(out - ref).max()) <= 1e-4 * scale


def test_benchmark_harness_reports_ratios(tmp_path):
    import json

    from benchmarks.mxnet_zoo import main
    assert main(["--models", "mobilenet1.0", "--size", "32", "--runs", "2", "--warmup", "1", "--peers",
                 "mxnet,fxc,fxc_optimize_for", "--out", str(tmp_path)]) == 0
    report = json.loads(next(tmp_path.glob("mxnet-*.json")).read_text())
    assert report["meta"]["cpu"] and report["meta"]["threads"] >= 1
    peers = report["networks"][0]["peers"]
    assert set(peers) == {"mxnet", "fxc", "fxc_optimize_for"}
    for name in ("fxc", "fxc_optimize_for"):
        assert peers[name]["mxnet_over_this_median"] > 0 and peers[name]["max_err_rel"] < 1e-4
