"""The nine Gluon model-zoo networks fxc is held to, built offline with random weights (nothing is downloaded):
what `tests/capture/mxnet/test_mxnet_zoo.py` checks against MXNet and `benchmarks/mxnet_zoo.py` times.

`make_gluon(name, size)` gives an initialised network (MSRAPrelu weights, one forward to finish the deferred
shapes, then BatchNorm's running statistics, gamma and beta set to random non-trivial values: left as they are
initialised, every BN is an identity and deep nets' outputs shrink until any comparison passes) and its input.
`symbol_and_params(net)` gives the symbol and the `arg:`/`aux:` params dict `fxc.from_mxnet` takes.
"""
from __future__ import annotations

import numpy as np

from ..compat.numpy_aliases import import_mxnet  # noqa: F401  (mxnet through the numpy-alias shim; tests import it here)

# name -> (input size the benchmark uses, the smallest input size the network's fixed-size pools allow)
GLUON_ZOO = {
    "resnet18_v1": (224, 32), "resnet50_v2": (224, 32), "mobilenet1.0": (224, 32), "mobilenetv2_1.0": (224, 32),
    "squeezenet1.1": (224, 224), "densenet121": (224, 224), "vgg11_bn": (224, 32), "inceptionv3": (299, 299),
    "alexnet": (224, 64),
}


def randomize_batchnorm(net, seed: int = 1) -> None:
    """Running mean ~ N(0, 0.1), running var ~ U(0.5, 1.5), gamma ~ U(0.5, 1.5), beta ~ N(0, 0.1)."""
    mx = import_mxnet()
    rng = np.random.RandomState(seed)
    for name, p in sorted(net.collect_params().items()):
        draw = {"running_mean": lambda s: rng.randn(*s) * 0.1, "running_var": lambda s: rng.rand(*s) + 0.5,
                "gamma": lambda s: rng.rand(*s) + 0.5, "beta": lambda s: rng.randn(*s) * 0.1}
        for suffix, fn in draw.items():
            if name.endswith(suffix):
                p.set_data(mx.nd.array(fn(p.shape).astype(np.float32)))


def make_gluon(name: str, size: int | None = None, batch: int = 1, seed: int = 0):
    """(network, input NDArray) for a Gluon zoo name at `size` (default: the benchmark's)."""
    mx = import_mxnet()
    from mxnet.gluon.model_zoo import vision  # deferred: mxnet is optional, loaded through import_mxnet()'s shim
    size = size or GLUON_ZOO[name][0]
    mx.random.seed(seed)
    net = vision.get_model(name, pretrained=False)
    net.initialize(mx.init.MSRAPrelu())
    x = mx.nd.array(np.random.RandomState(seed).rand(batch, 3, size, size).astype(np.float32))
    net(x).wait_to_read()           # finishes the deferred initialisation
    randomize_batchnorm(net, seed + 1)
    return net, x


def symbol_and_params(net, input_name: str = "data") -> tuple:
    """(symbol of the net on one input named `input_name`, {"arg:...": NDArray, "aux:...": NDArray})."""
    mx = import_mxnet()
    sym = net(mx.sym.var(input_name))
    aux = set(sym.list_auxiliary_states())
    params = {("aux:" if p.name in aux else "arg:") + p.name: p.data() for p in net.collect_params().values()}
    return sym, params
