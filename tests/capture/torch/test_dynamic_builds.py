"""Dynamic shapes under torch.compile that stay dynamic (issue 42, item 1): a sequence dim under dynamic=True and an
autoregressive decode step (a KV cache that grows by a `cat` each step, attention over it) build once, not once per
size; each result equals eager's. Where a symbol must be dropped, one WARNING names the op and the symbol, and
fxc.explain lists it."""
import logging

import pytest
import torch
import torch._dynamo

import fxc.driver.build as BUILD
from fxc.capture.torch.recorder import recording


def builds() -> int:
    return BUILD.stats["builds"]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")       # count builds, not modules from the cache
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_sequence_dim_builds_once():
    """Issue 42's model: Dynamo's graph has [2*n, 64] views inside, so a partition's output was a product of two
    symbols, which the runtime's shapes could not say: the symbolic build failed and each n built again."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
                            torch.nn.Linear(64, 64)).eval()
    c = torch.compile(m, backend="fxc", dynamic=True)
    before = builds()
    with torch.no_grad():
        for n in (7, 16, 33, 64, 128, 200):
            x = torch.randn(2, n, 64)
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)
    assert builds() - before == 1


class Decoder(torch.nn.Module):
    """One GPT-2-like decode step: q, k, v of the new token; the cache grows by a cat along its length; attention of
    the new token over the whole cache; the grown cache is returned for the next step."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.qkv, self.out, self.heads = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), heads

    def forward(self, x, past_k, past_v):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        split = lambda a: a.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        k = torch.cat([past_k, split(k)], dim=2)
        v = torch.cat([past_v, split(v)], dim=2)
        att = torch.softmax(split(q) @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(y), k, v


def test_decode_step_builds_once_for_every_cache_length():
    torch.manual_seed(0)
    m = Decoder().eval()
    c = torch.compile(m, backend="fxc")
    k = v = torch.randn(1, 2, 4, 16)
    ek, ev = k, v
    per_step = []
    with torch.no_grad():
        for _ in range(12):
            before = builds()
            x = torch.randn(1, 1, 32)
            y, k, v = c(x, k, v)
            per_step.append(builds() - before)
            ey, ek, ev = m(x, ek, ev)
            torch.testing.assert_close(y, ey, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(k, ek)
    # Dynamo specialises the first two lengths and makes the third's graph dynamic (automatic dynamic shapes): its
    # partitions build once, and no later length builds (before, each of the 12 lengths built its own modules)
    assert k.shape[2] == 16 and per_step[:2] == [1, 1] and sum(per_step[3:]) == 0, per_step


def test_gpt2_generate_builds_few_modules():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, bos_token_id=0, eos_token_id=0)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(1, 500, (1, 6))
    ref = m.generate(ids, max_new_tokens=12, do_sample=False)
    m.forward = torch.compile(m.forward, backend="fxc")
    before = builds()
    out = m.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(out, ref)
    assert builds() - before <= 6, builds() - before       # was one build per cache length (14 here, 71 in the issue)


def test_a_dropped_symbol_is_one_warning_and_in_explain(caplog):
    """A partition that cannot keep its symbol (a cumsum along it: its CPU schedule picks its loop order from the
    size): the WARNING names the subgraph, the symbol and the op, and fxc.explain's report lists it; the results
    stay right, built per size."""
    f = lambda x: torch.cumsum(x, 0) * 2  # noqa: E731
    c = torch.compile(f, backend="fxc", dynamic=True)
    with caplog.at_level(logging.WARNING, logger="fxc"), recording() as rec, torch.no_grad():
        for n in (3, 5, 9):
            x = torch.randn(n, 8)
            torch.testing.assert_close(c(x), f(x))
    warned = [r.getMessage() for r in caplog.records if "cannot stay symbolic" in r.getMessage()]
    assert len(warned) == 1 and "cumsum" in warned[0], warned
    (drop,) = rec.dropped_symbols
    assert "cumsum" in drop.reason and drop.symbols[0] in warned[0], str(rec)
    assert "built once per size" in str(rec)
