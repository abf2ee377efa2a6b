"""`relay.testing`: the networks TVM's tutorials build with random weights, as PyTorch modules imported like
`from_pytorch`'s (`mod, params = relay.testing.resnet.get_workload(num_layers=18)`; input "data", NCHW float32).

    resnet      ResNet v1 of 18 or 34 layers (fxc.testing.models.ResNet)
    mobilenet   MobileNet v1 (depthwise-separable convolutions; width 1.0)
    vgg         VGG 11, 13, 16 or 19, with or without batch norm

Weights are PyTorch's default initialisation under a fixed seed, BatchNorm statistics measured on random images
(fxc.testing.models.randomize_batchnorm) and logits scaled to a std of about 1, so two calls give the same params;
the params are the modules' state_dict names (not TVM's). Other workloads raise UnsupportedAPIError.
"""
from __future__ import annotations

from .finder import module_getattr
from .frontend import TorchSource
from .ndarray import NDArray
from .unsupported import Namespace, UnsupportedAPIError

VGG = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}


def _check(name: str, layout: str, dtype: str, image_shape) -> tuple:
    if layout != "NCHW" or dtype != "float32":
        raise UnsupportedAPIError(f"relay.testing.{name}.get_workload(layout={layout!r}, dtype={dtype!r})",
                                  "the facade's workloads are NCHW float32")
    return tuple(int(d) for d in image_shape)


def _workload(module, batch_size: int, image_shape: tuple):
    """(mod, params) of a torch module with random weights, input "data" of (batch_size, *image_shape): BatchNorm
    statistics measured on random images, and the last Linear scaled so that the logits have a std of about 1."""
    import torch  # deferred: torch loads only for a workload

    from ...testing.models import randomize_batchnorm  # deferred: as torch
    images = torch.randn((8,) + image_shape, generator=torch.Generator().manual_seed(0))
    randomize_batchnorm(module, calibration_inputs=(images,))
    module.eval()
    last = [m for m in module.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        std = float(module(images).std())
        last.weight.div_(std)
        last.bias.div_(std)
    source = TorchSource(module, [("data", (int(batch_size),) + image_shape, "float32")])
    return source.module(), {name: NDArray(v) for name, v in source.params.items()}


def _resnet(batch_size: int = 1, num_classes: int = 1000, num_layers: int = 18, image_shape=(3, 224, 224),
           layout: str = "NCHW", dtype: str = "float32", **kwargs):
    import torch  # deferred: torch loads only for a workload

    from ...testing.models import ResNet  # deferred: as torch
    image_shape = _check("resnet", layout, dtype, image_shape)
    blocks = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}
    if num_layers not in blocks or kwargs:
        raise UnsupportedAPIError(f"relay.testing.resnet.get_workload(num_layers={num_layers}"
                                  f"{''.join(f', {k}=' for k in kwargs)})", "the facade builds ResNet-18 and -34 "
                                  "(basic blocks)")
    torch.manual_seed(0)
    return _workload(ResNet(blocks[num_layers], num_classes), batch_size, image_shape)


def _mobilenet(batch_size: int = 1, num_classes: int = 1000, image_shape=(3, 224, 224), dtype: str = "float32",
              layout: str = "NCHW"):
    import torch  # deferred: torch loads only for a workload
    from torch import nn  # deferred: as torch
    image_shape = _check("mobilenet", layout, dtype, image_shape)

    def unit(cin, cout, stride, groups=1, k=3):
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
    widths = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
        [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
    torch.manual_seed(0)
    layers = unit(image_shape[0], 32, 2)
    for cin, cout, stride in widths:
        layers += unit(cin, cin, stride, groups=cin) + unit(cin, cout, 1, k=1)
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, num_classes))
    return _workload(net, batch_size, image_shape)


def _vgg(batch_size: int = 1, num_classes: int = 1000, image_shape=(3, 224, 224), dtype: str = "float32",
        num_layers: int = 11, batch_norm: bool = False):
    import torch  # deferred: torch loads only for a workload
    from torch import nn  # deferred: as torch
    image_shape = _check("vgg", "NCHW", dtype, image_shape)
    if num_layers not in VGG:
        raise UnsupportedAPIError(f"relay.testing.vgg.get_workload(num_layers={num_layers})", "VGG has 11, 13, 16 "
                                  "or 19 layers")
    torch.manual_seed(0)
    layers, cin = [], image_shape[0]
    for convs, cout in zip(VGG[num_layers], (64, 128, 256, 512, 512)):
        for _ in range(convs):
            layers += [nn.Conv2d(cin, cout, 3, padding=1)] + [nn.BatchNorm2d(cout)] * batch_norm + [nn.ReLU()]
            cin = cout
        layers.append(nn.MaxPool2d(2))
    side = (image_shape[1] // 32) * (image_shape[2] // 32)
    net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * side, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                        nn.ReLU(), nn.Linear(4096, num_classes))
    return _workload(net, batch_size, image_shape)


def _namespace(name: str, get_workload) -> Namespace:
    return Namespace(f"tvm.relay.testing.{name}", f"relay.testing.{name}: random weights.", get_workload=get_workload)


resnet = _namespace("resnet", _resnet)
mobilenet = _namespace("mobilenet", _mobilenet)
vgg = _namespace("vgg", _vgg)
__getattr__ = module_getattr("tvm.relay.testing", default="the facade's relay.testing has resnet (18, 34), "
                             "mobilenet (v1) and vgg; import other networks from PyTorch with from_pytorch")
