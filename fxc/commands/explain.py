"""`fxc explain model.py:factory --input-shape ...`: what fxc.explain reports for a model the factory returns,
called on random inputs of the shapes given (fxc/capture/torch/explain.py), and its picture with --picture.

Takes the model and its example inputs (fxc/cli.py makes them as `fxc compile` does); produces the report's text.
"""
from __future__ import annotations

from ..capture.torch.explain import explain


def explain_text(model, inputs: tuple, target: str, picture=None) -> str:
    """The Explanation of `model` on `inputs` for `target` as text (and the picture written, where asked)."""
    report = explain(model, *inputs, target=target, picture=picture)
    return str(report) + (f"\npicture: {picture}" if picture is not None else "")
