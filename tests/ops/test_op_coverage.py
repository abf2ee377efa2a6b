"""Op coverage through torch.compile(backend="fxc"): for each op family, small functions compiled by fxc
must match eager PyTorch AND compile completely (nothing falls back to eager). Training steps
(forward + backward + SGD) of small conv and attention models must match eager with no fallback in the
backward graph either."""
import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fxc
import fxc.capture.torch.recorder as fxc_torch
from tests.helpers import check_module


@contextlib.contextmanager
def recording():
    """Collect what fxc compiled and what fell back (forward and backward graphs) while the block runs."""
    rec = fxc_torch.Explanation()
    fxc_torch._recorders.append(rec)
    try:
        yield rec
    finally:
        fxc_torch._recorders.remove(rec)


def check_compiled(fn, *inputs, **tol):
    """fn compiled by fxc matches eager and nothing in its graph fell back."""
    with recording() as rec:
        check_module(fn, *inputs, **tol)
    assert rec.graphs >= 1
    assert not rec.fallback_ops, f"fell back: {dict(rec.fallback_ops)} {rec.fallback_reasons}"


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=_g(seed))


IDX = torch.tensor([[0, 3, -1], [2, 0, 1]])


# -- convolution: transposed, grouped, dilated, 1-d --------------------------------------------------------------------
CONV = {
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                         ((2, 4, 5, 6), (4, 3, 3, 3), (3,))),
    "conv_transpose2d_groups_dilation": (lambda x, w: F.conv_transpose2d(x, w, stride=(2, 1), padding=(0, 2),
                                                                         dilation=(1, 2), groups=2),
                                         ((1, 4, 5, 4), (4, 2, 2, 3))),
    "conv_transpose1d": (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=1, output_padding=2),
                         ((2, 3, 7), (3, 5, 4), (5,))),
    "conv1d_grouped_dilated": (lambda x, w: F.conv1d(x, w, stride=2, padding=3, dilation=2, groups=2),
                               ((2, 4, 11), (6, 2, 3))),
    "conv2d_grouped_dilated": (lambda x, w: F.conv2d(x, w, padding=(2, 1), dilation=(2, 3), groups=3),
                               ((1, 6, 9, 10), (9, 2, 3, 2))),
}


@pytest.mark.parametrize("name", sorted(CONV))
def test_convolution(name):
    fn, shapes = CONV[name]
    check_compiled(fn, *[randn(*s, seed=k) for k, s in enumerate(shapes)])


# -- interpolation (becomes aten.index.Tensor with computed indices), padding, pixel shuffle ---------------------------
IMAGE = {
    "nearest_scale2": lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    "nearest_size": lambda x: F.interpolate(x, size=(4, 11), mode="nearest"),
    "nearest_exact": lambda x: F.interpolate(x, size=(9, 5), mode="nearest-exact"),
    "bilinear": lambda x: F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=False),
    "bilinear_align_corners": lambda x: F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True),
    "bilinear_downscale": lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear"),
    "bicubic": lambda x: F.interpolate(x, size=(8, 9), mode="bicubic", align_corners=False),
    "bicubic_align_corners": lambda x: F.interpolate(x, size=(8, 9), mode="bicubic", align_corners=True),
    "linear_1d": lambda x: F.interpolate(x.flatten(2), size=13, mode="linear"),
    "upsample_module": nn.Upsample(scale_factor=3, mode="nearest"),
    "pad_constant": lambda x: F.pad(x, (1, 2, 0, 3), value=0.5),
    "pad_reflect": lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"),
    "pad_replicate": lambda x: F.pad(x, (3, 0, 1, 2), mode="replicate"),
    "pad_circular": lambda x: F.pad(x, (1, 2, 2, 1), mode="circular"),
    "pad_reflect_1d": lambda x: F.pad(x.flatten(2), (2, 3), mode="reflect"),
    "pixel_shuffle": lambda x: F.pixel_shuffle(x, 2),
    "pixel_unshuffle": lambda x: F.pixel_unshuffle(x[..., :6], 2),
    "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x.round(), (4, 3), return_indices=True),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, (4, 5)),
    "grid_sample_bilinear": lambda x: F.grid_sample(x, torch.rand(2, 5, 3, 2, generator=_g(9)) * 2.4 - 1.2,
                                                    align_corners=False),
    "grid_sample_nearest_align": lambda x: F.grid_sample(x, torch.rand(2, 4, 4, 2, generator=_g(9)) * 2.4 - 1.2,
                                                         mode="nearest", align_corners=True),
}


@pytest.mark.parametrize("name", sorted(IMAGE))
def test_image(name):
    check_compiled(IMAGE[name], randn(2, 4, 6, 7))


# -- scaled dot-product attention --------------------------------------------------------------------------------------
ATTENTION = {
    "plain": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "float_mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=randn(5, 6, seed=7)),
    "bool_mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                attn_mask=torch.rand(1, 5, 6, generator=_g(3)) > 0.3),
    "scale": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
}


@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_attention(name):
    q, k, v = randn(2, 3, 5, 8, seed=1), randn(2, 3, 6, 8, seed=2), randn(2, 3, 6, 8, seed=3)
    if name == "causal":
        k, v = k[:, :, :5], v[:, :, :5]
    check_compiled(ATTENTION[name], q, k, v)


# -- scans, sort, top-k ------------------------------------------------------------------------------------------------
TIES = torch.tensor([[2.0, 1.0, 3.0, 1.0, 2.0, 0.0, 3.0], [5.0, 5.0, 5.0, -1.0, 4.0, 4.0, 0.0]])
SCAN = {
    "cumsum": (lambda x: torch.cumsum(x, 1), randn(3, 7)),
    "cumsum_dim0": (lambda x: torch.cumsum(x, 0), randn(4, 5, 3)),
    "cumsum_int": (lambda x: torch.cumsum(x, 1), torch.randint(-5, 5, (3, 9), generator=_g())),
    "cumprod": (lambda x: torch.cumprod(x, -1), randn(3, 7) * 0.5 + 1),
    "logcumsumexp": (lambda x: torch.logcumsumexp(x, 1), randn(3, 7) * 5),
    "cummax": (lambda x: torch.cummax(x, 1), TIES),
    "cummin": (lambda x: torch.cummin(x, 1), TIES),
    "sort": (lambda x: torch.sort(x, 1), TIES),
    "sort_descending": (lambda x: torch.sort(x, 1, descending=True), TIES),
    "sort_stable_dim0": (lambda x: torch.sort(x, dim=0, stable=True), randn(33, 4)),
    "sort_nan": (lambda x: [t.nan_to_num(7.0, 9.0) for t in torch.sort(x, -1, descending=True)],
                 torch.tensor([[1.0, float("nan"), -2.0, float("inf"), 0.5]])),
    "sort_int": (lambda x: torch.sort(x, 1), torch.randint(-3, 3, (4, 10), generator=_g())),
    "argsort": (lambda x: torch.argsort(x, dim=1, stable=True), TIES),
    "topk": (lambda x: torch.topk(x, 3, dim=1), torch.randperm(40, generator=_g()).reshape(4, 10).float()),
    "topk_smallest": (lambda x: torch.topk(x, 2, dim=0, largest=False),
                      torch.randperm(40, generator=_g()).reshape(8, 5).float()),
    "kthvalue": (lambda x: torch.kthvalue(x, 3, 1), torch.randperm(40, generator=_g()).reshape(4, 10).float()),
    "median": (lambda x: (*torch.median(x, 1), torch.median(x)), TIES),
    "median_nan": (lambda x: [t.nan_to_num(9.0)
                              for t in (*torch.median(x, 1), *torch.nanmedian(x, 1), torch.nanmedian(x))],
                   torch.tensor([[3.0, float("nan"), 1.0, float("nan"), 2.0], [float("nan")] * 5,
                                 [1.0, 2.0, 2.0, 3.0, 0.0]])),
}


@pytest.mark.parametrize("name", sorted(SCAN))
def test_scan_and_sort(name):
    fn, x = SCAN[name]
    check_compiled(fn, x)


# -- gather / scatter / indexing ---------------------------------------------------------------------------------------
INDEX = {
    "gather": lambda x: torch.gather(x, 1, IDX.clamp(min=0)),
    "scatter_src": lambda x: x.scatter(1, IDX.clamp(min=0) + 1, randn(2, 3, seed=4)),
    "scatter_value": lambda x: x.scatter(0, torch.tensor([[4, 0, 2, 1, 3, 0]]), -7.0),
    "scatter_add_duplicates": lambda x: x.scatter_add(1, torch.tensor([[1, 1, 1], [5, 0, 5]]), randn(2, 3, seed=4)),
    "scatter_reduce_sum": lambda x: x.scatter_reduce(1, torch.tensor([[1, 1, 2], [5, 0, 5]]), randn(2, 3, seed=4),
                                                     "sum", include_self=False),
    "scatter_reduce_prod": lambda x: x.scatter_reduce(1, torch.tensor([[1, 1, 2], [5, 0, 5]]), randn(2, 3, seed=4),
                                                      "prod"),
    "scatter_reduce_mean": lambda x: x.scatter_reduce(1, torch.tensor([[1, 1, 2], [5, 0, 5]]), randn(2, 3, seed=4),
                                                      "mean"),
    "scatter_reduce_mean_excl": lambda x: x.scatter_reduce(0, torch.tensor([[1, 1, 2], [4, 1, 2]]),
                                                           randn(2, 3, seed=4), "mean", include_self=False),
    "scatter_reduce_amax": lambda x: x.scatter_reduce(1, torch.tensor([[1, 1, 2], [5, 0, 5]]), randn(2, 3, seed=4),
                                                      "amax", include_self=False),
    "scatter_reduce_amin": lambda x: x.scatter_reduce(1, torch.tensor([[1, 1, 2], [5, 0, 5]]), randn(2, 3, seed=4),
                                                      "amin"),
    "index_rows": lambda x: x[IDX],
    "index_two_dims": lambda x: x[IDX, IDX.flip(0)],
    "index_cols": lambda x: x[:, torch.tensor([5, -1, 0, 2])],
    "index_put": lambda x: x.index_put((torch.tensor([0, 3, -1]),), randn(3, 6, seed=5)),
    "index_put_accumulate": lambda x: x.index_put((torch.tensor([1, 1, 4, 1]),), randn(4, 6, seed=5), accumulate=True),
    "index_put_broadcast": lambda x: x.index_put((torch.tensor([[0], [2]]), torch.tensor([1, 4, 5])),
                                                 torch.tensor(3.0)),
    "setitem": lambda x: x.clone().index_fill(1, torch.tensor([0, 2]), 9.0),
    "index_select": lambda x: x.index_select(1, torch.tensor([5, 0, 0, 2])),
    "masked_fill": lambda x: x.masked_fill(x > 0.3, -1.0),
    "slice_scatter": lambda x: torch.slice_scatter(x, randn(5, 2, seed=6), 1, 1, 5, 2),
    "one_hot_like": lambda x: torch.zeros(5, 6).scatter(1, torch.tensor([[0], [3], [5], [1], [1]]), 1.0) * x,
    "masked_scatter": lambda x: x.masked_scatter(x > 0.2, randn(40, seed=8)),
    "masked_scatter_broadcast": lambda x: x[0].masked_scatter(torch.tensor([[True], [False], [True]]),
                                                              randn(20, seed=8)),
    "zero_dim": lambda x: (torch.gather(x[0, 0], 0, torch.tensor(0)), x[1, 1].scatter_add(0, torch.tensor(0), x[2, 2]),
                           torch.topk(x[3, 3], 1), torch.kthvalue(x[4, 4], 1),
                           x[0, 1].index_select(0, torch.tensor([0]))),
}


@pytest.mark.parametrize("name", sorted(INDEX))
def test_indexing(name):
    check_compiled(INDEX[name], randn(5, 6))


# -- activations and normalisation -------------------------------------------------------------------------------------
ACT = {
    "logsigmoid": F.logsigmoid, "hardshrink": F.hardshrink, "softshrink": lambda x: F.softshrink(x, 0.3),
    "threshold": lambda x: F.threshold(x, 0.1, 20.0), "celu": lambda x: F.celu(x, 0.7), "selu": F.selu,
    "glu": lambda x: F.glu(x, 1), "softsign": F.softsign, "tanhshrink": F.tanhshrink, "relu6": F.relu6,
    "rrelu_eval": lambda x: F.rrelu(x, training=False), "softmin": lambda x: F.softmin(x, 1), "mish": F.mish,
    "hardswish": F.hardswish, "silu": F.silu, "elu": F.elu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "prelu": lambda x: F.prelu(x.reshape(2, 3, 5), torch.tensor([0.1, -0.2, 0.3])),
    "logit": lambda x: torch.logit(torch.sigmoid(x)), "softplus": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
}


@pytest.mark.parametrize("name", sorted(ACT))
def test_activation(name):
    check_compiled(ACT[name], randn(3, 10) * 3)


NORM = {
    "group_norm": lambda x: F.group_norm(x, 2, randn(4, seed=1), randn(4, seed=2)),
    "group_norm_no_affine": lambda x: F.group_norm(x, 4),
    "instance_norm": lambda x: F.instance_norm(x),
    "batch_norm_batch_stats": lambda x: F.batch_norm(x, None, None, randn(4, seed=1), randn(4, seed=2), training=True),
    "layer_norm": lambda x: F.layer_norm(x, (6, 7)),
    "vector_norm": lambda x: torch.linalg.vector_norm(x, dim=(1, 2)),
    "vector_norm_orders": lambda x: torch.linalg.vector_norm(x, 1) + torch.linalg.vector_norm(x, float("inf"))
    + torch.linalg.vector_norm(x, 3, dim=0).sum() + torch.linalg.vector_norm(x, 0)
    + torch.linalg.vector_norm(x, -1.5, dim=-1).sum() + torch.linalg.vector_norm(x, -float("inf")),
    "normalize": lambda x: F.normalize(x, dim=1),
    "cosine_similarity": lambda x: F.cosine_similarity(x, x.flip(0), dim=1),
}


@pytest.mark.parametrize("name", sorted(NORM))
def test_normalization(name):
    check_compiled(NORM[name], randn(2, 4, 6, 7))


def test_explain_reports_no_fallback():
    """fxc.explain on a function mixing the new families names no fallback op."""
    def f(x, i):
        y = F.interpolate(x, scale_factor=2, mode="bilinear")
        z = torch.cumsum(y, -1).gather(-1, i.expand(2, 4, 12, 3))
        return torch.topk(z, 2, dim=-1).values + F.group_norm(z, 2).sum()
    rep = fxc.explain(f, randn(2, 4, 6, 7), torch.tensor([0, 5, 13]))
    assert not rep.fallback_ops, str(rep)
    for op in ("aten.index.Tensor", "aten.cumsum.default", "aten.gather.default", "aten.topk.default",
               "aten.native_group_norm.default"):
        assert op in rep.compiled_ops, str(rep)


# -- training steps: forward + backward + SGD, parameters compared with eager, no fallback anywhere --------------------
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.b2 = nn.BatchNorm2d(8)
        self.up = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)
        self.gn = nn.GroupNorm(2, 6)
        self.c1d = nn.Conv1d(6, 4, 3, padding=2, dilation=2)
        self.fc = nn.Linear(4 * 4, 5)

    def forward(self, x):
        x = self.pool(F.relu6(self.b1(self.c1(x))))                 # (N, 8, 8, 8)
        x = F.hardswish(self.b2(self.dw(x)))                         # (N, 8, 4, 4)
        x = F.silu(self.gn(self.up(x)))                              # (N, 6, 8, 8)
        x = F.interpolate(x, scale_factor=0.5, mode="bilinear")     # (N, 6, 4, 4)
        x = F.pad(x, (1, 1, 1, 1), mode="reflect")
        # (N, 6, 4, 4)
        x = F.avg_pool2d(x, 2, 2, 1) + F.adaptive_avg_pool2d(x, (4, 4)) + F.adaptive_max_pool2d(x, (4, 4))
        x = self.c1d(x[..., :4, :4].flatten(2))                     # (N, 4, 16)
        x = torch.cumsum(x, -1)[..., ::4]                            # (N, 4, 4)
        return self.fc(x.flatten(1))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=50, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(8, dim) * 0.1)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ff1, self.ff2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids, mask):
        n, s = ids.shape
        x = self.emb(ids) + self.pos[:s]
        q, k, v = self.qkv(self.ln1(x)).reshape(n, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :], is_causal=False)
        a2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj((a + a2).transpose(1, 2).reshape(n, s, -1))
        x = x + self.ff2(F.gelu(self.ff1(self.ln2(x))))
        return self.head(x)


def _train(model, inputs, target, steps=2):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        out = model(*inputs)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        loss.backward()
        opt.step()
    return loss.detach()


def check_training(model, inputs, target, atol=1e-4):
    eager = copy.deepcopy(model)
    compiled = torch.compile(copy.deepcopy(model), backend="fxc")
    with recording() as rec:
        got = _train(compiled, inputs, target)
    want = _train(eager, inputs, target)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=atol)
    for (name, a), (_, b) in zip(compiled.state_dict().items(), eager.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=atol, msg=lambda m: f"{name}: {m}")
    assert rec.graphs >= 2, "forward and backward graphs should both reach fxc"
    assert not rec.fallback_ops, f"fell back: {dict(rec.fallback_ops)} {rec.fallback_reasons}"


def test_training_convnet():
    torch.manual_seed(0)
    model = ConvNet().train()
    check_training(model, (randn(4, 3, 16, 16),), torch.tensor([0, 1, 4, 2]))


def test_training_transformer():
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 8), generator=_g())
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    check_training(TinyTransformer().train(), (ids, mask), torch.randint(0, 50, (2, 8), generator=_g(1)))


def test_training_indexing_and_sorting():
    """Backward of gather, index, scatter_add, sort/topk, cumprod, replication pad and pixel shuffle."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 6, 6) * 0.5)
            self.lin = nn.Linear(6, 5)

        def forward(self, x):
            h = F.pad(self.w * x, (1, 2, 2, 1), mode="replicate")[None]    # (1, 4, 9, 9)
            h = F.pixel_shuffle(h[..., :8, :8], 2)[0]                        # (1, 16, 16)
            h = h[:, IDX.clamp(min=0)].sum(-1)                               # (1, 2, 3)
            s = torch.sort(h, -1, descending=True).values[..., :6]
            t = torch.topk(self.w.flatten(1), 6, dim=1).values
            c = torch.cumprod(torch.sigmoid(t), 1)
            g = torch.gather(c, 1, torch.tensor([[0, 5, 2]]).expand(4, 3)).sum(1, keepdim=True)
            z = torch.zeros(4, 6).scatter_add(1, torch.tensor([[1, 1, 3, 0, 0, 5]]).expand(4, 6), c)
            return self.lin(z + g + s.reshape(-1, 6)[:1])
    torch.manual_seed(0)
    check_training(M(), (randn(4, 6, 6),), torch.tensor([0, 1, 2, 3]))
