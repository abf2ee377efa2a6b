"""Reference models in plain PyTorch with random weights (no torchvision, no downloads).

Used by tests and benchmarks/: ``make_model(name)`` builds a model in eval mode with a fixed seed and
non-trivial BatchNorm statistics, ``example_inputs(name, batch)`` gives matching inputs.

Models:
  * ``resnet18``      — ResNet-18 (BasicBlock), input (N, 3, 224, 224) float32
  * ``mobilenet_v2``  — MobileNetV2 (width 1.0), input (N, 3, 224, 224) float32
  * ``bert``          — BERT-style encoder (explicit matmul/softmax attention), inputs
                        input_ids int64 (N, S) and attention_mask int64 (N, S)
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

__all__ = [
    "resnet18",
    "mobilenet_v2",
    "bert_encoder",
    "make_model",
    "example_inputs",
    "randomize_batchnorm",
    "MODEL_NAMES",
]

MODEL_NAMES = ("resnet18", "mobilenet_v2", "bert")


# ----------------------------------------------------------------------------------------------
# ResNet-18
# ----------------------------------------------------------------------------------------------
def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, cout: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(cout, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: tuple[int, ...] = (2, 2, 2, 2), num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet((2, 2, 2, 2), num_classes)


# ----------------------------------------------------------------------------------------------
# MobileNetV2
# ----------------------------------------------------------------------------------------------
def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(cin, hidden, kernel=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),  # depthwise
            nn.Conv2d(hidden, cout, 1, bias=False),  # pointwise-linear
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    # t (expansion), c (channels), n (repeats), s (stride)
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2):
        super().__init__()
        cin = _make_divisible(32 * width_mult)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, cin, stride=2)]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU6(cin, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(num_classes: int = 1000) -> MobileNetV2:
    return MobileNetV2(num_classes)


# ----------------------------------------------------------------------------------------------
# BERT-style encoder
# ----------------------------------------------------------------------------------------------
class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        assert hidden % heads == 0, "hidden must be divisible by heads"
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (N,S,H) -> (N,heads,S,d)
        n, s, _ = x.shape
        return x.view(n, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + additive_mask, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        n, s = ctx.shape[0], ctx.shape[1]
        return self.out(ctx.view(n, s, self.heads * self.head_dim))


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float = 1e-12):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.ffn_out = nn.Linear(intermediate, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(x + self.attention(x, additive_mask))
        return self.ffn_norm(x + self.ffn_out(self.act(self.ffn_in(x))))


class BertEncoder(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, intermediate: int,
                 max_len: int, type_vocab: int = 2, eps: float = 1e-12):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_len, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.emb_norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, intermediate, eps) for _ in range(layers))
        self.register_buffer("position_ids", torch.arange(max_len).unsqueeze(0), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, max_len, dtype=torch.long), persistent=False)
        for m in self.modules():  # BERT's initialiser
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        s = input_ids.shape[1]
        x = (self.word_embeddings(input_ids)
             + self.position_embeddings(self.position_ids[:, :s])
             + self.token_type_embeddings(self.token_type_ids[:, :s]))
        x = self.emb_norm(x)
        # (N,S) int mask -> (N,1,1,S) additive mask: 0 where attended, -10000 where padded
        additive_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, additive_mask)
        return x


def bert_encoder(vocab: int = 30522, hidden: int = 256, layers: int = 4, heads: int = 4,
                 intermediate: int = 1024, max_len: int = 128) -> BertEncoder:
    return BertEncoder(vocab, hidden, layers, heads, intermediate, max_len)


# ----------------------------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------------------------
def randomize_batchnorm(model: nn.Module, seed: int = 0,
                        calibration_inputs: tuple[torch.Tensor, ...] | None = None) -> nn.Module:
    """Give every BatchNorm / LayerNorm non-trivial affine parameters and running statistics.

    Fresh BN layers are identity-like (mean 0, var 1, weight 1, bias 0); with those an error in a
    compiler's BN handling goes unnoticed, and deep random nets drift until their output no longer
    depends on the input. So: random affine parameters, then running statistics measured on
    ``calibration_inputs`` (one train-mode pass with a cumulative average), which keeps activations
    normalised through the depth of the net. Without calibration inputs the statistics are random.
    """
    g = torch.Generator().manual_seed(seed)

    def uniform(t: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
        return torch.rand(t.shape, generator=g) * (hi - lo) + lo

    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(uniform(m.running_var, 0.5, 1.5))
                m.weight.copy_(uniform(m.weight, 0.5, 1.5))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.copy_(uniform(m.weight, 0.8, 1.2))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.05)
        if calibration_inputs is not None and bns:
            was_training = model.training
            saved = [(m.momentum, m.training) for m in bns]
            for m in bns:
                m.reset_running_stats()
                m.momentum = None  # cumulative moving average over the calibration pass
            model.train()
            model(*calibration_inputs)
            model.train(was_training)
            for m, (momentum, training) in zip(bns, saved):
                m.momentum = momentum
                m.train(training)
    return model


_BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "bert": bert_encoder,
}


_CONV_NETS = ("resnet18", "mobilenet_v2")


def make_model(name: str, seed: int = 0) -> nn.Module:
    """Build ``name`` in eval mode with fixed-seed weights and randomised normalisation statistics."""
    if name not in _BUILDERS:
        raise KeyError(f"unknown model {name!r}; choose one of {sorted(_BUILDERS)}")
    torch.manual_seed(seed)
    model = _BUILDERS[name]()
    calibration = example_inputs(name, batch=4, seed=seed + 1) if name in _CONV_NETS else None
    randomize_batchnorm(model, seed + 1, calibration)
    model.eval()
    if name in _CONV_NETS:
        _normalize_logits(model, example_inputs(name, batch=2, seed=seed + 2))
    return model


def _normalize_logits(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    """Rescale the final Linear so that logits have std ~1 on random inputs.

    With random weights ResNet-18's logits come out with std ~4 and MobileNetV2's (whose classifier
    is initialised with std 0.01) with std ~0.07; O(1) outputs keep absolute-error checks meaningful.
    """
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        std = float(model(*inputs).std())
        if std > 0:
            last.weight.div_(std)
            last.bias.div_(std)


def example_inputs(name: str, batch: int = 1, seq_len: int = 128, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Deterministic example inputs for ``make_model(name)``."""
    g = torch.Generator().manual_seed(seed)
    if name in ("resnet18", "mobilenet_v2"):
        return (torch.randn(batch, 3, 224, 224, generator=g),)
    if name == "bert":
        input_ids = torch.randint(0, 30522, (batch, seq_len), generator=g, dtype=torch.long)
        attention_mask = torch.ones(batch, seq_len, dtype=torch.long)
        # pad the tail of every other sequence so the mask actually matters
        for i in range(0, batch, 2):
            attention_mask[i, seq_len - seq_len // 4:] = 0
        return input_ids, attention_mask
    raise KeyError(f"unknown model {name!r}; choose one of {list(MODEL_NAMES)}")
