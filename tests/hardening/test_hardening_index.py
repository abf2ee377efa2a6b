"""Index ops never clamp silently (issue 23, item 11): an index outside its dimension fails the call, as in eager
PyTorch, with fxc.errors.IndexOutOfRangeError (an IndexError and a RuntimeError) naming the op and the index,
through torch.compile, fxc.from_torch and an exported artifact (Python and C); in-range indices, negative ones
included where eager counts them from the end, give eager's results, and a failed call leaves no flag behind."""
import subprocess

import numpy as np
import pytest
import torch

import fxc
from fxc.errors import IndexOutOfRangeError
from fxc.runtime.artifact.extract import extract
from fxc.runtime.artifact.read import PARAMS

pytestmark = pytest.mark.all_targets       # every target: these cases must hold on each (tests/targets.py)

BAD_ROWS = [100, -1, 10 ** 6, 2 ** 40, -2 ** 62]       # the indices, for a 100-row embedding


def _compiled(fn, target):
    return torch.compile(fn, backend="fxc", options={"target": target})


def _raises_like_eager(fn, compiled, args, op, bad):
    with pytest.raises((IndexError, RuntimeError)):
        fn(*args)
    with pytest.raises(IndexOutOfRangeError) as e:
        compiled(*args)
    assert isinstance(e.value, IndexError) and isinstance(e.value, RuntimeError)
    msg = str(e.value)
    assert msg.startswith(f"{op}: index {bad} is out of range"), msg


class _Emb(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(100, 8)

    def forward(self, idx):
        return self.emb(idx) * 2


@pytest.mark.parametrize("bad", BAD_ROWS)
def test_embedding_out_of_range_raises_through_torch_compile(bad, target):
    model = _Emb().eval()
    c = _compiled(model, target)
    ok = torch.tensor([[0, 99, 5]])
    with torch.no_grad():
        torch.testing.assert_close(c(ok), model(ok))
        _raises_like_eager(model, c, (torch.tensor([[3, bad, 5]]),), "embedding", bad)
        torch.testing.assert_close(c(ok), model(ok))           # the error flag does not stick


def test_embedding_out_of_range_raises_in_from_torch_and_load(tmp_path):
    model = _Emb().eval()
    ok = torch.tensor([[0, 99, 5]])
    compiled = fxc.from_torch(model, (ok,))
    loaded = fxc.load(fxc.export(compiled, tmp_path / "emb.fxc"))
    with torch.no_grad():
        expected = model(ok).numpy()
    for bad in BAD_ROWS:
        idx = torch.tensor([[3, bad, 5]])
        for run in (compiled, loaded):
            with pytest.raises(IndexOutOfRangeError, match=f"embedding: index {bad} is out of range"):
                run(idx.numpy() if run is loaded else idx)
    np.testing.assert_allclose(loaded(ok.numpy()), expected, rtol=1e-6)
    np.testing.assert_allclose(compiled(ok).numpy(), expected, rtol=1e-6)


CASES = {   # name: (fn, args builder(index), in-range indices incl. eager's negative ones, a bad index, op in message)
    "gather": (lambda x, i: x.gather(1, i) + 1, lambda i: (torch.randn(3, 5), torch.tensor([[0, 4], [1, 2], [i, 0]])),
               [0, 4], 5, "gather"),
    "gather_negative": (lambda x, i: x.gather(1, i) + 1,
                        lambda i: (torch.randn(3, 5), torch.tensor([[0, 4], [1, 2], [i, 0]])), [3], -1, "gather"),
    "index_select": (lambda x, i: x.index_select(0, i) * 2, lambda i: (torch.randn(6, 3), torch.tensor([1, i, 0])),
                     [5], 6, "index_select"),
    "index": (lambda x, i: x[i] * 2, lambda i: (torch.randn(6, 3), torch.tensor([1, i])), [-6, -1, 5], -7, "index"),
    "index_2d": (lambda x, i: x[:, i] + 1, lambda i: (torch.randn(2, 6), torch.tensor([i, 2])), [-1, 5], 6, "index"),
    "take": (lambda x, i: torch.take(x, i) + 1, lambda i: (torch.randn(3, 4), torch.tensor([0, i])), [-12, 11], 12,
             "index"),
    "index_put": (lambda x, i: x.index_put((i,), torch.ones(2, 3)), lambda i: (torch.randn(6, 3), torch.tensor([i, 1])),
                  [-6, 5], 6, "index_put"),
    "index_put_acc": (lambda x, i: x.index_put((i,), torch.ones(2, 3), accumulate=True),
                      lambda i: (torch.randn(6, 3), torch.tensor([i, 1])), [-1, 0], -7, "index_put"),
    "scatter": (lambda x, i: x.scatter(0, i, torch.ones(1, 3)),
                lambda i: (torch.randn(4, 3), torch.tensor([[i, 0, 1]])), [3], 4, "scatter"),
    "scatter_negative": (lambda x, i: x.scatter(0, i, torch.ones(1, 3)),
                         lambda i: (torch.randn(4, 3), torch.tensor([[i, 0, 1]])), [0], -1, "scatter"),
    "scatter_add": (lambda x, i: x.scatter_add(1, i, torch.ones(4, 2)),
                    lambda i: (torch.randn(4, 3), torch.tensor([[i, 0]] * 4)), [2], 3, "scatter"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_ops_check_bounds_as_eager(name, target):
    fn, args, good, bad, op = CASES[name]
    c = _compiled(fn, target)
    torch.manual_seed(0)
    for i in good:
        a = args(i)
        torch.testing.assert_close(c(*a), fn(*a))
    _raises_like_eager(fn, c, args(bad), op, bad)
    a = args(good[0])
    torch.testing.assert_close(c(*a), fn(*a))


C_MAIN = r"""
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "fxc_model.h"
int main(int argc, char **argv) {
    static int64_t idx[3] = {0, 99, 5};
    static float out[3 * 8];
    const void *in[1] = {idx};
    void *outs[1] = {out};
    if (argc != 2 || fxc_init(argv[1])) return 1;
    if (fxc_main(in, outs) != 0) return 2;
    idx[1] = 100;
    int rc = fxc_main(in, outs);
    printf("%d %s\n", rc, fxc_last_error());
    idx[1] = 1;
    return rc == FXC_ERR_INDEX && fxc_main(in, outs) == 0 ? 0 : 3;
}
"""


def test_c_entry_returns_the_index_error(tmp_path):
    """fxc_main returns FXC_ERR_INDEX with a message naming the op and the index, and runs again afterwards."""
    model = _Emb().eval()
    path = fxc.export(fxc.from_torch(model, (torch.tensor([[0, 99, 5]]),)), tmp_path / "emb.fxc")
    d = extract(path, tmp_path / "model")
    assert (d / PARAMS).exists()
    (tmp_path / "main.c").write_text(C_MAIN)
    cc = subprocess.run(["gcc", "-std=c11", "-O1", str(tmp_path / "main.c"), "-I", str(d), "-L", str(d), "-lfxc_model",
                         f"-Wl,-rpath,{d}", "-o", str(tmp_path / "main")], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    p = subprocess.run([str(tmp_path / "main"), str(d)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.startswith("4 fxc_main: embedding: index 100 is out of range"), p.stdout


def test_concurrent_calls_report_their_own_index_errors():
    """Threads calling one compiled module at once, half of their calls with an out-of-range index: every bad call
    raises (naming its own index), every good call returns eager's rows (never index 0's values in silence)."""
    import threading
    model = _Emb().eval()
    n = 200_000                 # calls of a few ms, so the threads' calls overlap
    good = torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(0))
    m = fxc.from_torch(model, (good,))
    want = model(good).detach().numpy()
    problems = []

    def worker(k):
        bad = good.clone()
        bad[n // 2 + k] = 100 + k
        for i in range(12):
            try:
                if (i + k) % 2:
                    m(bad)
                    problems.append(f"thread {k}: a bad call returned")
                else:
                    np.testing.assert_allclose(m(good).numpy(), want, rtol=1e-6, atol=1e-6)
            except IndexOutOfRangeError as e:
                if (i + k) % 2 == 0 or f"index {100 + k} " not in str(e):
                    problems.append(f"thread {k}: {e}")
            except AssertionError:
                problems.append(f"thread {k}: wrong rows")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
