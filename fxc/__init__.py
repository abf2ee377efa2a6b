"""fxc: a deep-learning compiler that works inside your framework.

    torch.compile(model, backend="fxc")          # PyTorch, no import needed
    fxc.explain(model, *example_inputs)          # what compiled, what fell back, which kernels
"""
from .errors import FxcError  # noqa: F401

__version__ = "0.1.0"


def explain(model, *example_inputs, **options):
    """Compile `model` with torch.compile(backend="fxc") on the inputs and report what happened.

    Returns
    -------
    fxc.capture.torch.Explanation with .compiled_ops, .fallback_ops (collections.Counter of op name ->
    count over all captured graphs), .kernels (one line per fused kernel) and a readable str().
    """
    from .capture.torch import explain as _explain
    return _explain(model, *example_inputs, **options)
