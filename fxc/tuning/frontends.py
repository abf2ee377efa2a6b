"""The graph IR of the models fxc.tune takes: a torch.nn.Module (or callable) with example inputs, an ONNX model
(a ModelProto, its bytes or a .onnx path; example inputs fix its input shapes), a model fxc.from_mxnet compiled
(with shapes=), or a graph IR as it is."""
from __future__ import annotations

import os

import numpy as np

from ..errors import FxcError
from ..relay_like.graph import Graph


def graph_of(model, example_inputs=None, caller: str = "fxc.tune") -> Graph:
    """The graph IR of `model` (errors name `caller`, the public function the user called)."""
    if isinstance(model, Graph):
        return model
    kind = type(model).__module__.split(".")[0]
    if kind == "torch" or _is_torch_module(model):
        import torch  # deferred: as above

        from ..capture.torch.aot import capture  # deferred: `import fxc` loads no torch
        from ..capture.torch.graph import to_graph  # deferred: as above
        if example_inputs is None:
            raise FxcError(f"{caller}(model, example_inputs, ...): a torch model needs example inputs (a tensor or a "
                           "tuple of tensors) to fix its shapes")
        args = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        args = tuple(torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in args)
        gm, _ = capture(model, args, None)
        return to_graph(gm, args)[0]
    if kind == "onnx" or isinstance(model, (bytes, os.PathLike)) or (isinstance(model, str)
                                                                      and model.endswith(".onnx")):
        from ..capture.onnx import load_model, model_inputs, to_graph  # deferred: `import fxc` loads no onnx
        proto = load_model(model)
        if example_inputs is None:
            shapes = [dims for _, _, dims in model_inputs(proto)]
            if any(d is None or not all(isinstance(x, int) for x in d) for d in shapes):
                raise FxcError(f"{caller}: this ONNX model's inputs have symbolic or unknown dims: give "
                               "example_inputs (arrays of the shapes to compile for)")
        else:
            arrays = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
            shapes = [tuple(np.shape(a)) for a in arrays]
        return to_graph(proto, shapes)
    if type(model).__name__ == "MXNetModel":
        return model._model.to_graph(model._shapes, model._dtypes)
    raise FxcError(f"{caller} takes a torch.nn.Module with example inputs, an ONNX model or .onnx path, a model "
                   f"fxc.from_mxnet(..., shapes=...) compiled, or a graph IR; not {type(model).__name__}")


def framework_of(model) -> str | None:
    """"torch" for a PyTorch model (its user's process has PyTorch loaded: the confirmation measures so), else
    None."""
    return "torch" if type(model).__module__.split(".")[0] == "torch" or _is_torch_module(model) else None


def _is_torch_module(model) -> bool:
    return any(c.__module__.startswith("torch.") for c in type(model).__mro__)
