"""A symbolic batch on the `webgl` target (issue 26): one build for every batch by row launches (fxc/driver/rows.py;
the page's plan runs each row group per block of 8 rows and per tail of 1, 2 or 4 rows, every operand moved by a
texel offset uniform). torch.compile(dynamic=True), fxc.from_torch with a Dim, fxc.export + fxc.load and the static
web package (`fxc web`, the page's ?size=N), results against eager PyTorch; a batch outside the range is an
InputError (the page's error). A missing browser is a failure, not a skip."""
import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
import fxc.driver.build as BUILD
from fxc.errors import InputError


def _mlp():
    """Rows of 24, 37 and 6 elements: 37 and 6 are not whole texels, so their last rows run 4 and 2 at a time."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 37), torch.nn.GELU(), torch.nn.Linear(37, 6),
                               torch.nn.Softmax(-1)).eval()


def _convnet():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 6, 3, stride=2), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(6 * 3 * 3, 5)).eval()


def _check(compiled, model, x):
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_torch_compile_dynamic_mlp_builds_once():
    model = _mlp()
    compiled = torch.compile(model, backend="fxc", dynamic=True, options={"target": "webgl"})
    before = BUILD.stats["builds"]
    for n in (3, 5, 17):
        _check(compiled, model, torch.randn(n, 24))
    assert BUILD.stats["builds"] - before == 1


def test_from_torch_dynamic_convnet_builds_once_and_refuses_out_of_range():
    model = _convnet()
    before = BUILD.stats["builds"]
    compiled = fxc.from_torch(model, (torch.randn(2, 3, 14, 14),), dynamic_shapes=({0: Dim("batch", min=1, max=20)},),
                              target="webgl")
    for n in (3, 5, 17):
        _check(compiled, model, torch.randn(n, 3, 14, 14))
    assert BUILD.stats["builds"] - before == 1
    with pytest.raises(InputError, match="outside the compiled range"):
        compiled(torch.randn(21, 3, 14, 14))


def test_tail_rows_keep_texel_alignment():
    """Rows of 37 elements: the rows after the blocks run 4 at a time (37 x 4 elements: whole texels), the last
    launch past s when s % 8 is not a multiple of 4; every offset a whole number of texels."""
    from fxc.runtime.launch import Launch
    from fxc.runtime.row_plan import expand
    plan = [Launch("a8", [("out", 0), ("in", 0)], (1,), (1,), rows=(148, 96), repeat=(0, 8, 0, 8)),
            Launch("a4", [("out", 0), ("in", 0)], (1,), (1,), rows=(148, 96), repeat=(0, 8, 1, 4))]
    got = [(st.kernel, offs) for st, offs in expand(plan, 13)]
    assert got == [("a8", [0, 0]), ("a4", [8 * 148, 8 * 96]), ("a4", [12 * 148, 12 * 96])]
    assert all(o % 16 == 0 for _, offs in got for o in offs)
    assert [st.kernel for st, _ in expand(plan, 16)] == ["a8", "a8"]


def test_binary_tails_run_at_most_one_launch_of_each_size():
    """Caps.binary_tails (webgl): the rows after the blocks as one launch of 4, one of 2 and the last unit's."""
    from fxc.runtime.launch import Launch
    from fxc.runtime.row_plan import expand
    plan = [Launch(f"a{u}", [("out", 0)], (1,), (1,), rows=(16,), repeat=(0, 8, p, u, m, int(u == 1)))
            for p, (u, m) in enumerate(((8, 8), (4, 8), (2, 4), (1, 2)))]
    for s in range(1, 30):
        got = [(st.kernel, offs[0] // 16) for st, offs in expand(plan, s)]
        rows = [r for k, start in got for r in range(start, start + int(k[1:]))]
        assert rows == list(range(s)), (s, got)          # every row once, in order
        assert len(got) == s // 8 + bin(s % 8).count("1")


@pytest.fixture(scope="module")
def dynamic_artifact(tmp_path_factory):
    model = _convnet()
    compiled = fxc.from_torch(model, (torch.randn(2, 3, 14, 14),), dynamic_shapes=({0: Dim("batch", min=1, max=20)},),
                              target="webgl")
    return model, fxc.export(compiled, tmp_path_factory.mktemp("dyn") / "convnet.fxc")


def test_export_and_load_run_any_batch_in_range(dynamic_artifact):
    model, path = dynamic_artifact
    m = fxc.load(path)
    assert m.symbols and m.symbols[0]["max"] == 20
    with torch.no_grad():
        for n in (3, 5, 17):
            x = torch.randn(n, 3, 14, 14)
            np.testing.assert_allclose(m(x.numpy()), model(x).numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(InputError, match="outside the compiled range"):
        m(np.zeros((21, 3, 14, 14), np.float32))


def test_web_package_runs_the_size_the_page_asks_for(dynamic_artifact, tmp_path):
    """`fxc web` of the dynamic artifact: the page runs the sample (batch 3) tiled to ?size=N; a size outside the
    range is the page's error naming the range."""
    from fxc.deploy.web import serve, write_package
    from tests.deploy.test_web_package import _open
    model, path = dynamic_artifact
    x = np.random.default_rng(3).standard_normal((3, 3, 14, 14)).astype(np.float32)
    index = write_package(path, tmp_path / "site", inputs=[x], runs=1)
    with serve(index.parent) as server:
        for n in (5, 17):
            page, got = _open(server.url + f"?size={n}")
            page.close()
            assert got["state"] == "done", got["status"]
            with torch.no_grad():
                expected = model(torch.from_numpy(x[np.arange(n) % 3])).numpy()
            np.testing.assert_allclose(np.asarray(got["outputs"][0], np.float32).reshape(expected.shape), expected,
                                       rtol=1e-4, atol=1e-4)
        page, got = _open(server.url + "?size=21")
        page.close()
        assert got["state"] == "error" and "outside the compiled range [1, 20]" in got["status"]
