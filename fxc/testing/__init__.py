"""Test and benchmark helpers: reference models with random weights (see models.py)."""
from .models import MODEL_NAMES, bert_encoder, example_inputs, make_model, mobilenet_v2, resnet18

__all__ = ["MODEL_NAMES", "bert_encoder", "example_inputs", "make_model", "mobilenet_v2", "resnet18"]
