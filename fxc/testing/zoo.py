"""More architectures beside the three reference models, each a small, randomly initialised twin of a family a
user brings (no weights can be downloaded here): what `benchmarks/zoo.py` times against eager and what
`tests/capture/torch/test_models.py` checks against it. Each exercises ops and shapes the reference models do not:

- convnext: 7x7 depthwise convs, LayerNorm over channels through NHWC permutes, per-channel layer scale;
- efficientnet: SiLU, 5x5 depthwise convs, squeeze-and-excitation (global pool, 1x1 convs, sigmoid gate);
- vit: a 16x16 stride-16 patch conv, class token, nn.TransformerEncoder (pre-norm, GELU);
- gpt: causal scaled_dot_product_attention, tanh GELU, an output projection tied to the embedding;
- unet: transposed 2x2 up-convs, bilinear upsampling, channel concatenation, max pooling;
- wav2vec2: 1-D audio convs (a kernel-10 stride-5 stem, strided kernel-3 and kernel-2 convs, GroupNorm), a grouped
  positional Conv1d (kernel 128, 16 groups, wav2vec2-base's) and nn.TransformerEncoder (post-norm, GELU);
- lstm: nn.LSTM (Dynamo captures it only with torch._dynamo.config.allow_rnn = True; fxc then compiles it as a
  loop over time steps, fxc/ops/rnn.py; without the switch it runs in eager PyTorch and fxc compiles the head).

`make_zoo_model(name, small=True)` gives a reduced size for tests.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .models import randomize_batchnorm

__all__ = ["ZOO_NAMES", "make_zoo_model", "zoo_inputs"]


class _ChannelNorm(nn.Module):
    """LayerNorm over the channels of an NCHW map (through NHWC), as ConvNeXt's stem and downsampling use."""

    def __init__(self, c):
        super().__init__()
        self.ln = nn.LayerNorm(c)

    def forward(self, x):
        return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _ConvNeXtBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.ln = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.scale = nn.Parameter(torch.full((d,), 0.5))

    def forward(self, x):
        y = self.fc2(F.gelu(self.fc1(self.ln(self.dw(x).permute(0, 2, 3, 1))))) * self.scale
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims=(96, 192), depth=2, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), _ChannelNorm(dims[0]))
        stages = []
        for i, d in enumerate(dims):
            if i:
                stages += [_ChannelNorm(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2)]
            stages += [_ConvNeXtBlock(d) for _ in range(depth)]
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)).mean((2, 3)))


class _SqueezeExcite(nn.Module):
    def __init__(self, c, r):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, r, 1), nn.Conv2d(r, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(F.adaptive_avg_pool2d(x, 1)))))


class _MBConv(nn.Module):
    def __init__(self, cin, cout, expand, k, stride):
        super().__init__()
        h = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU()) \
            if expand != 1 else nn.Identity()
        self.dw = nn.Sequential(nn.Conv2d(h, h, k, stride, k // 2, groups=h, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.se = _SqueezeExcite(h, max(1, cin // 4))
        self.project = nn.Sequential(nn.Conv2d(h, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class EfficientNet(nn.Module):
    """EfficientNet-B0's stages (one block each past the first, fewer than B0's 16) at its widths."""
    CFG = [(32, 16, 1, 3, 1), (16, 24, 6, 3, 2), (24, 24, 6, 3, 1), (24, 40, 6, 5, 2), (40, 40, 6, 5, 1),
           (40, 80, 6, 3, 2), (80, 80, 6, 3, 1), (80, 112, 6, 5, 1), (112, 192, 6, 5, 2), (192, 320, 6, 3, 1)]

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU())
        self.blocks = nn.Sequential(*[_MBConv(*c) for c in self.CFG])
        self.head = nn.Sequential(nn.Conv2d(320, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.SiLU())
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.head(self.blocks(self.stem(x))), 1).flatten(1))


class ViT(nn.Module):
    def __init__(self, image=224, patch=16, d=192, layers=4, heads=3, classes=1000):
        super().__init__()
        n = (image // patch) ** 2 + 1
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.ln(self.encoder(x))[:, 0])


class _GPTBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(c, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=8192, d=256, layers=4, heads=4, context=128):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[_GPTBlock(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        return self.ln(self.blocks(x)) @ self.tokens.weight.t()


def _double_conv(a, b):
    return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(),
                         nn.Conv2d(b, b, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    def __init__(self, c=32, classes=2):
        super().__init__()
        self.enc1, self.enc2, self.enc3 = _double_conv(3, c), _double_conv(c, 2 * c), _double_conv(2 * c, 4 * c)
        self.up = nn.ConvTranspose2d(4 * c, 2 * c, 2, 2)
        self.dec2, self.dec1 = _double_conv(4 * c, 2 * c), _double_conv(3 * c, c)
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        a = self.enc1(x)
        b = self.enc2(F.max_pool2d(a, 2))
        c = self.enc3(F.max_pool2d(b, 2))
        d = self.dec2(torch.cat([self.up(c), b], 1))
        up = F.interpolate(d, scale_factor=2, mode="bilinear", align_corners=False)
        return self.out(self.dec1(torch.cat([up, a], 1)))


class Wav2Vec2(nn.Module):
    """wav2vec2-base's shape: a feature encoder of 7 GELU 1-D convs (kernel 10 stride 5, four of kernel 3 and two of
    kernel 2 stride 2; GroupNorm after the first), a projection to `d`, a grouped positional conv (kernel `pos_kernel`,
    `pos_groups` groups, padding kernel/2 with the last position dropped) added to its input, `layers` post-norm
    transformer layers. 1 s of 16 kHz audio [1, 16000] gives 49 positions. (No weight norm: a plain conv.)"""

    def __init__(self, c=512, d=768, layers=2, heads=12, pos_kernel=128, pos_groups=16):
        super().__init__()
        specs = [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2
        self.convs = nn.ModuleList(nn.Conv1d(1 if i == 0 else c, c, k, s, bias=False) for i, (k, s) in enumerate(specs))
        self.norm0 = nn.GroupNorm(c, c)
        self.ln, self.proj = nn.LayerNorm(c), nn.Linear(c, d)
        self.pos = nn.Conv1d(d, d, pos_kernel, padding=pos_kernel // 2, groups=pos_groups)
        self.pos_ln = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, audio):
        x = audio[:, None]
        for i, conv in enumerate(self.convs):
            x = F.gelu(self.norm0(conv(x)) if i == 0 else conv(x))
        x = self.proj(self.ln(x.transpose(1, 2)))
        p = self.pos(x.transpose(1, 2))
        p = F.gelu(p[:, :, :-1] if self.pos.kernel_size[0] % 2 == 0 else p)
        return self.encoder(self.pos_ln(x + p.transpose(1, 2)))


class LSTMClassifier(nn.Module):
    def __init__(self, features=64, hidden=128, layers=2, classes=10):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc(self.lstm(x)[0][:, -1])


# name -> (full-size constructor, its input, reduced constructor, its input)
_ZOO = {
    "convnext": (ConvNeXt, lambda: (torch.randn(1, 3, 224, 224),),
                 lambda: ConvNeXt((16, 32), 1, 10), lambda: (torch.randn(2, 3, 32, 40),)),
    "efficientnet": (EfficientNet, lambda: (torch.randn(1, 3, 224, 224),),
                     lambda: EfficientNet(10), lambda: (torch.randn(2, 3, 64, 64),)),
    "vit": (ViT, lambda: (torch.randn(1, 3, 224, 224),),
            lambda: ViT(32, 8, 48, 2, 3, 10), lambda: (torch.randn(2, 3, 32, 32),)),
    "gpt": (GPT, lambda: (torch.randint(0, 8192, (1, 128)),),
            lambda: GPT(512, 64, 2, 4, 32), lambda: (torch.randint(0, 512, (2, 32)),)),
    "unet": (UNet, lambda: (torch.randn(1, 3, 128, 128),),
             lambda: UNet(8), lambda: (torch.randn(2, 3, 32, 24),)),
    "wav2vec2": (Wav2Vec2, lambda: (torch.randn(1, 16000),),
                 lambda: Wav2Vec2(32, 64, 1, 4, 16, 4), lambda: (torch.randn(2, 3200),)),
    "lstm": (LSTMClassifier, lambda: (torch.randn(1, 32, 64),),
             lambda: LSTMClassifier(8, 16, 2, 4), lambda: (torch.randn(2, 6, 8),)),
}
ZOO_NAMES = tuple(_ZOO)


def zoo_inputs(name: str, small: bool = False, seed: int = 0) -> tuple:
    torch.manual_seed(seed)
    return _ZOO[name][3 if small else 1]()


def make_zoo_model(name: str, small: bool = False, seed: int = 0) -> nn.Module:
    """`name` in eval mode with fixed-seed weights; batch-norm statistics calibrated on a random batch (fresh ones
    would make the deep nets' activations vanish, and an output that no longer depends on the input would make a
    comparison with eager vacuous)."""
    torch.manual_seed(seed)
    model = _ZOO[name][2 if small else 0]()
    x = zoo_inputs(name, small, seed + 1)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        randomize_batchnorm(model, seed, calibration_inputs=x)
    else:
        randomize_batchnorm(model, seed)
    return model.eval()
