"""The picture of a fused graph (fxc/deploy/picture.py): `fxc inspect --graph` of an artifact and fxc.explain's
picture=, rendered by graphviz and by fxc's own layout, opened in the headless Chromium, counted and photographed."""
import struct

import pytest
import torch

import fxc
from fxc.cli import main
from fxc.deploy.picture import Box, Drawing, _group_box, to_dot, write_picture
from fxc.errors import FxcError
from fxc.runtime.artifact.read import read_verified
from fxc.runtime.browser.page import open_browser


class Net(torch.nn.Module):
    """Two convs of one shape (groups of equal signature share their kernel) and a residual add."""
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2, self.c3 = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        z = torch.relu(self.c3(torch.relu(self.c2(y))))
        return self.fc((z + y).mean((2, 3)))


class Broken(torch.nn.Module):
    """A graph break (a data-dependent if) and bessel_j0, which opencl cannot lower in float64."""
    def __init__(self):
        super().__init__()
        self.c, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(8, 4)

    def forward(self, x):
        z = (torch.special.bessel_j0(torch.relu(self.c(x))) + 1).mean((2, 3))
        if z.sum() > 0:
            z = z * 2
        return self.fc(z).softmax(-1)


def _png_size(path) -> tuple:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def _open(path, shot):
    """(group clusters, region clusters, eager groups, <svg> elements) of the page at `path`; a screenshot to `shot`."""
    browser = open_browser()
    page = browser.visit(path.as_uri(), name=f"picture-{path.name}")
    try:
        counts = page.call("() => ['g.cluster.group', 'g.cluster.region', 'g.cluster.eager', 'svg']"
                           ".map(s => document.querySelectorAll(s).length)")
        page.screenshot(shot)
    finally:
        page.close()
    return counts


@pytest.fixture(scope="module", params=["llvm", "opencl"])
def artifact(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("picture")
    torch.manual_seed(0)
    compiled = fxc.from_torch(Net().eval(), (torch.randn(1, 3, 8, 8),), target=request.param)
    return fxc.export(compiled, d / "net.fxc"), d


@pytest.mark.parametrize("layout", ["dot", "fxc"])
def test_inspect_graph_in_the_browser(artifact, layout, capsys):
    path, d = artifact
    m = read_verified(path, None)[0]
    kernels = [s["kernel"] for s in m["plan"]]
    assert len(set(kernels)) < len(kernels)         # (a kernel shared by two groups: still two clusters)
    out = d / f"net-{layout}.html"
    if layout == "dot":
        assert main(["inspect", str(path), "--graph", str(out)]) == 0
        assert f"{len(m['kernels'])} fused groups" in capsys.readouterr().out
    else:
        from fxc.deploy.picture import manifest_drawing
        write_picture(manifest_drawing(m, "net"), out, layout="fxc")
    groups, regions, eager, svgs = _open(out, d / f"{layout}.png")
    assert (groups, regions, eager, svgs) == (len(m["kernels"]), 0, 0, 1)
    w, h = _png_size(d / f"{layout}.png")
    assert w >= 300 and h >= 60 * len(m["kernels"])        # a box per group, one above the other
    html = out.read_text()
    for name in kernels:                                    # every kernel named, every output type on an edge
        assert f">{name}" in html
    assert "float32[1, 4]" in html and "float32[1, 3, 8, 8]" in html


def test_explain_picture_graph_break_and_refused_op(tmp_path):
    out = tmp_path / "broken.html"
    e = fxc.explain(Broken().eval(), torch.randn(1, 3, 8, 8), target="opencl", picture=out)
    assert e.graphs == 2 and e.failures
    groups, regions, eager, _ = _open(out, tmp_path / "broken.png")
    # graph 0: its one partition failed (bessel_j0 in float64 on opencl): one eager cluster with the error; graph 1:
    # compiled, a region holding its kernels (mul, matmul+add, softmax)
    assert eager == 1 and regions == 1 and groups == 1 + len(e.kernels)
    html = out.read_text()
    assert "ran in eager PyTorch" in html and "j0" in html and "compiled for opencl" in html
    assert "grid" in html                       # launch shapes of the device kernels


def test_explain_picture_keeps_weights_out(tmp_path):
    out = tmp_path / "net.dot"
    fxc.explain(Net().eval(), torch.randn(1, 3, 8, 8), picture=out)
    dot = out.read_text()
    assert dot.count("subgraph cluster_g") >= 3 and dot.count("subgraph cluster_r") == 1
    assert "float32[8, 3, 3, 3]" not in dot     # the conv weight is no input box


def test_group_lines_and_colours():
    cpu = _group_box("k1_relu: conv2d_packed+add+relu -> float32[1, 8, 8, 8]  [anchor conv2d_packed]", "k1_relu")
    assert (cpu.kind, cpu.ops, cpu.detail) == ("kernel", ["conv2d_packed", "add", "relu"], "float32[1, 8, 8, 8]")
    gpu = _group_box("matmul+add -> float32[1, 4]  [anchor matmul]  [opencl: k1_add grid 1x1 x block 1x4]", "k1_add")
    assert (gpu.kind, gpu.detail) == ("kernel", "grid 1x1 x block 1x4")
    page = _group_box("scatter -> float32[4]  [wasm in the page: p3_scatter; webgl refused it: no scatter]",
                      "p3_scatter")
    assert (page.kind, page.detail) == ("offload", "webgl refused it: no scatter")
    pre = _group_box("k0_pack: pack_lanes -> float32[1, 3, 3, 3, 16]  [prepack]", "k0_pack")
    assert pre.kind == "prepack"
    d = Drawing("t", [Box("eager", "nonzero", ["nonzero"]), Box("offload", "p1", ["scatter"], region="r")])
    dot = to_dot(d)
    assert 'class="group eager"' in dot and 'class="group offload"' in dot and d.clusters == 3


def test_picture_errors(tmp_path):
    d = Drawing("t", [Box("kernel", "k0", ["add"])])
    with pytest.raises(FxcError, match="ending in .svg, .html, .dot"):
        write_picture(d, tmp_path / "g.png")
    with pytest.raises(FxcError, match="does not exist"):
        write_picture(d, tmp_path / "missing" / "g.svg")
    assert not (tmp_path / "missing").exists()


def test_offloaded_group_has_its_colour(tmp_path):
    """webgl runs the groups its shaders cannot express (a scatter) as wasm kernels in the page: their clusters are
    the offload colour, titled with the kernel and why webgl refused it."""
    import numpy as np

    from fxc.deploy.picture import module_drawing
    from fxc.driver.build import build
    from fxc.ops.registry import all_ops
    from fxc.relay_like.builder import Builder
    arrays, attrs = all_ops()["scatter"].samples(np.random.default_rng(0))[0]
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype)) for a in arrays]
    outs = b.graph.call("scatter", ins, **attrs)
    b.graph.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    module = build(b.graph, target="webgl")
    d, _, _ = module_drawing(module, "scatter on webgl")
    offloaded = [box for box in d.boxes if box.kind == "offload"]
    assert offloaded and all("webgl refused it" in box.detail for box in offloaded), module.kernels
    write_picture(d, tmp_path / "s.svg")
    assert 'class="cluster group offload"' in (tmp_path / "s.svg").read_text()     # (graphviz keeps the class)
