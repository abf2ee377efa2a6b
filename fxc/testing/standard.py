"""Standard `torch.nn` modules as users write them, with random weights: what
`tests/capture/torch/test_standard_modules.py`
checks against eager and the benchmark harness times (`python -m benchmarks.run --models transformer_encoder:1`).
In eval mode these reach PyTorch's fused fast paths and recurrent kernels (fxc/capture/torch/fused.py):

- transformer_encoder: nn.TransformerEncoder, 4 x nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0,
  activation="gelu", batch_first=True), enable_nested_tensor=False, input [1, 128, 256]
  (`aten._transformer_encoder_layer_fwd` per layer);
- transformer_decoder: nn.TransformerDecoder, 4 x nn.TransformerDecoderLayer(256, 4, 1024, dropout=0.0,
  batch_first=True), causal self-attention (`tgt_is_causal=True`), target [1, 64, 256], memory [1, 128, 256];
- mha: nn.MultiheadAttention(256, 4, batch_first=True) self-attention with a key padding mask (the last 16 of 128
  keys masked), input [1, 128, 256];
- lstm_classifier, gru_classifier: a 2-layer nn.LSTM / nn.GRU(64, 128, batch_first=True) classifier (a linear
  head on the last step), input [1, 32, 64]. Dynamo captures them only with `torch._dynamo.config.allow_rnn =
  True` (`RNN_NAMES`).

`make_standard_model(name, small=True)` gives a reduced size for tests; `standard_inputs` its inputs.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .models import randomize_batchnorm

__all__ = ["STANDARD_NAMES", "RNN_NAMES", "make_standard_model", "standard_inputs"]


def transformer_encoder(d=256, heads=4, ffn=1024, layers=4, norm_first=False, activation="gelu"):
    layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class TransformerDecoder(nn.Module):
    """nn.TransformerDecoder with a causal target mask (passed as `tgt_is_causal=True`: Dynamo cannot trace the
    mask comparison PyTorch makes to detect a causal mask by itself)."""

    def __init__(self, d=256, heads=4, ffn=1024, layers=4, steps=64):
        super().__init__()
        layer = nn.TransformerDecoderLayer(d, heads, ffn, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(steps), persistent=False)

    def forward(self, tgt, memory):
        return self.decoder(tgt, memory, tgt_mask=self.causal, tgt_is_causal=True)


class SelfAttention(nn.Module):
    """nn.MultiheadAttention over one sequence, keys masked by `key_padding_mask` (True: padding)."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x, key_padding_mask):
        return self.attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0]


class RNNClassifier(nn.Module):
    """A recurrent stack (nn.LSTM / nn.GRU / nn.RNN) and a linear head on the last time step."""

    def __init__(self, kind="lstm", features=64, hidden=128, layers=2, classes=10, bidirectional=False):
        super().__init__()
        cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
        self.rnn = cls(features, hidden, layers, batch_first=True, bidirectional=bidirectional)
        self.fc = nn.Linear(hidden * (2 if bidirectional else 1), classes)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


def _padding(batch, steps, masked):
    m = torch.zeros(batch, steps, dtype=torch.bool)
    m[:, steps - masked:] = True
    return m


# name -> (full-size constructor, its inputs, reduced constructor, its inputs)
_STANDARD = {
    "transformer_encoder": (transformer_encoder, lambda: (torch.randn(1, 128, 256),),
                            lambda: transformer_encoder(64, 4, 128, 2), lambda: (torch.randn(2, 16, 64),)),
    "transformer_decoder": (TransformerDecoder,
                            lambda: (torch.randn(1, 64, 256), torch.randn(1, 128, 256)),
                            lambda: TransformerDecoder(64, 4, 128, 2, 12),
                            lambda: (torch.randn(2, 12, 64), torch.randn(2, 16, 64))),
    "mha": (SelfAttention, lambda: (torch.randn(1, 128, 256), _padding(1, 128, 16)),
            lambda: SelfAttention(64, 4), lambda: (torch.randn(2, 16, 64), _padding(2, 16, 5))),
    "lstm_classifier": (lambda: RNNClassifier("lstm"), lambda: (torch.randn(1, 32, 64),),
                        lambda: RNNClassifier("lstm", 8, 16, 2, 4), lambda: (torch.randn(2, 6, 8),)),
    "gru_classifier": (lambda: RNNClassifier("gru"), lambda: (torch.randn(1, 32, 64),),
                       lambda: RNNClassifier("gru", 8, 16, 2, 4), lambda: (torch.randn(2, 6, 8),)),
}
STANDARD_NAMES = tuple(_STANDARD)
RNN_NAMES = ("lstm_classifier", "gru_classifier")     # Dynamo captures them with torch._dynamo.config.allow_rnn


def standard_inputs(name: str, small: bool = False, seed: int = 0) -> tuple:
    torch.manual_seed(seed)
    return _STANDARD[name][3 if small else 1]()


def make_standard_model(name: str, small: bool = False, seed: int = 0) -> nn.Module:
    """`name` in eval mode with fixed-seed weights (layer norms' affine parameters and the attention biases, which
    PyTorch starts at one and zero, randomised too: no part is an identity a wrong kernel could hide behind)."""
    torch.manual_seed(seed)
    model = _STANDARD[name][2 if small else 0]()
    randomize_batchnorm(model, seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1 and not p.any():        # attention biases start at zero: give them values
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()
