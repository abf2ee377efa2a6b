"""Debug output of a build: FXC_DEBUG=2 dumps that define every value they use (constants included), the level-1
line of a module cache hit, and FXC_DEBUG_DIR's folder per compile (fxc/driver/debug.py)."""
import re

import torch

import fxc


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, 3), torch.nn.LayerNorm(3)).eval()


def _undefined(dump: str) -> set:
    """The %values a graph dump uses but never defines (as an input, a constant or a node's output)."""
    defined, used = set(), set()
    for line in dump.splitlines():
        if line.startswith("graph("):
            defined |= set(re.findall(r"%(\w+):", line))
            continue
        lhs, eq, rhs = line.partition(" = ")
        if not eq:          # "  return %v.."
            used |= set(re.findall(r"%(\w+)", line))
            continue
        defined |= set(re.findall(r"%(\w+):", lhs))
        used |= set(re.findall(r"%(\w+)", rhs))
    return used - defined


def test_debug_dir_one_folder_per_compile(tmp_path, monkeypatch, capfd):
    root = tmp_path / "dbg"
    monkeypatch.setenv("FXC_DEBUG_DIR", str(root))
    x = torch.randn(2, 3, 6, 6)
    m = _model()
    for target in ("llvm", "llvm"):       # the same build twice: the cache is bypassed, two folders
        c = fxc.from_torch(m, (x,), target=target)
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
    folders = sorted(root.iterdir())
    assert len(folders) == 2 and all(f.name.endswith("-llvm") for f in folders)
    assert f"[fxc] debug folder: {folders[0]}" in capfd.readouterr().err
    names = {p.name for p in folders[0].iterdir()}
    assert {"graph_00_input.txt", "graph_01_infer_types.txt", "plan.txt", "loop_ir.txt", "source.txt", "report.txt",
            "graph.html"} <= names
    assert not [n for n in names if n.endswith(".tmp")]         # atomic writes leave no temporary files
    passes = sorted(n for n in names if n.startswith("graph_") and n.endswith(".txt"))
    from fxc.relay_like.pipeline import PIPELINE
    assert len(passes) == 1 + len(PIPELINE)
    for name in passes:         # every dump defines what it uses: the constants are printed
        text = (folders[0] / name).read_text()
        assert not _undefined(text), (name, _undefined(text), text)
    assert "= const " in (folders[0] / passes[-1]).read_text()
    report = (folders[0] / "report.txt").read_text()
    kernels = [ln for ln in report.splitlines() if re.match(r"  k\d+_", ln)]
    assert kernels and "define" in (folders[0] / "source.txt").read_text()     # LLVM IR
    assert all(ln.split(":")[0].strip() in (folders[0] / "loop_ir.txt").read_text() for ln in kernels)
    assert 'class="cluster group' in (folders[0] / "graph.html").read_text()


def test_debug_2_prints_small_constants(monkeypatch, capfd):
    monkeypatch.setenv("FXC_DEBUG", "2")
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)).eval()
    fxc.from_torch(m, (torch.randn(2, 4),))
    err = capfd.readouterr().err
    dumps = [d for d in err.split("[fxc] ") if d.startswith("pass ") and "graph(" in d]
    assert dumps
    for d in dumps:
        g = d[d.index("graph("):]
        assert not _undefined(g), g
    assert "= const [1., 1., 1., 1.]" in err            # LayerNorm's weight, all its values
    assert re.search(r"float32\[4, 4\] = const <16 values in \[-?\d", err)   # a larger one: its count and range


def test_cache_hit_says_how_to_see_the_passes(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FXC_MODULE_CACHE", raising=False)
    m, x = _model(), torch.randn(1, 3, 6, 6)
    fxc.from_torch(m, (x,))
    capfd.readouterr()
    monkeypatch.setenv("FXC_DEBUG", "1")
    fxc.from_torch(m, (x,))
    err = capfd.readouterr().err
    assert "module from the cache" in err and "FXC_DEBUG=2 or FXC_MODULE_CACHE=0 builds it again" in err
