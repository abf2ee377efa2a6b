"""The compile cache is bounded (fxc/runtime/store.py, FXC_CACHE_MAX_BYTES): least recently used entries go first (a hit
counts as a use), the bound holds after every write, two processes writing at once keep it and a true size count,
and an evicted entry is a clean miss (no warning; a build on a tiny bound still runs and is right)."""
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from fxc.driver import cache as module_cache
from fxc.runtime import store as cache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bounded(monkeypatch, tmp_path):
    """A fresh cache folder in use by this process; set its bound with monkeypatch.setenv("FXC_CACHE_MAX_BYTES")."""
    monkeypatch.setattr(cache, "_state", {"wanted": None, "dir": None, "private": None})
    monkeypatch.setattr(cache, "_warned", set())
    monkeypatch.setenv("FXC_CACHE_DIR", str(tmp_path / "c"))
    return tmp_path / "c"


def _age(root: Path, name: str, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(root / name, (t, t))


def _on_disk(root: Path) -> int:
    return sum(size for _, size, _ in cache._files(root))


def test_max_bytes_parses_sizes(monkeypatch):
    for text, n in (("", 2 << 30), ("1000", 1000), ("512M", 512 << 20), ("2G", 2 << 30), ("1.5k", 1536),
                    ("0", 0), ("3GiB", 3 << 30)):
        monkeypatch.setenv("FXC_CACHE_MAX_BYTES", text)
        assert cache.max_bytes() == n, text
    monkeypatch.setenv("FXC_CACHE_MAX_BYTES", "lots")
    monkeypatch.setattr(cache, "_warned", set())
    with pytest.warns(RuntimeWarning, match="FXC_CACHE_MAX_BYTES"):
        assert cache.max_bytes() == cache.DEFAULT_MAX_BYTES


def test_least_recently_used_is_evicted_first_and_a_hit_is_a_use(bounded, monkeypatch):
    monkeypatch.setenv("FXC_CACHE_MAX_BYTES", "12000")        # 3 entries of 3040 bytes fit, 4 do not
    data = {k: bytes([i]) * 3000 for i, k in enumerate("abcd")}
    for k in "abc":
        cache.write_entry(f"objects/{k}.o", data[k])
    for k, age in zip("abc", (1000, 900, 800)):                # a oldest, then b, then c
        _age(bounded, f"objects/{k}.o", age)
    assert cache.read_entry("objects/a.o") == data["a"]        # a hit: a is now the most recently used
    cache.write_entry("objects/d.o", data["d"])                # over the bound: down to 80% of it
    assert cache.read_entry("objects/b.o") is None             # the least recently used entry went
    for k in "acd":
        assert cache.read_entry(f"objects/{k}.o") == data[k], k
    assert _on_disk(bounded) <= 12000


def test_bound_holds_after_every_write_and_the_count_is_true(bounded, monkeypatch):
    monkeypatch.setenv("FXC_CACHE_MAX_BYTES", "10000")
    monkeypatch.setattr(cache, "GRACE_S", 0.0)                 # every entry may go (no loader is mid-way here)
    for i in range(40):
        cache.write_entry(f"modules/m{i}.npz", os.urandom(900 + 13 * i))
        assert _on_disk(bounded) <= 10000, i
        assert int((bounded / ".lock").read_text()) == _on_disk(bounded), i
    assert cache.read_entry("modules/m39.npz") is not None     # the newest stays
    assert cache.read_entry("modules/m0.npz") is None


def test_recently_used_entries_are_not_evicted(bounded, monkeypatch):
    """An entry used in the last GRACE_S seconds stays even past the bound: a loader may be between its check and
    its dlopen."""
    monkeypatch.setenv("FXC_CACHE_MAX_BYTES", "1000")
    for k in "ab":
        cache.write_entry(f"{k}.so", b"x" * 800)
    assert cache.read_entry("a.so") is not None and cache.read_entry("b.so") is not None


WRITER = '''
import os, sys
from fxc.runtime import store as cache
cache.GRACE_S = 0.0
tag = sys.argv[1]
for i in range(60):
    data = bytes([i % 256]) * (700 + 37 * i) + tag.encode()
    cache.write_entry(f"objects/{tag}-{i}.o", data)
    got = cache.read_entry(f"objects/{tag}-{i // 2}.o")      # a read races the other writer's evictions
    assert got is None or got == bytes([(i // 2) % 256]) * (700 + 37 * (i // 2)) + tag.encode()
print("ok")
'''


def test_concurrent_writers_keep_the_bound_and_a_true_count(bounded, monkeypatch):
    env = dict(os.environ, FXC_CACHE_DIR=str(bounded), FXC_CACHE_MAX_BYTES="20000", PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, tag], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for tag in ("p", "q", "r")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert _on_disk(bounded) <= 20000
    assert int((bounded / ".lock").read_text()) == _on_disk(bounded)
    monkeypatch.setenv("FXC_CACHE_MAX_BYTES", "20000")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # every entry left is whole: no damage warning
        left = [p for _, _, p in cache._files(bounded)]
        assert left and all(cache.read_entry(os.path.relpath(p, bounded)) is not None for p in left)
    assert not [p for p in bounded.rglob("*") if p.name.endswith(".tmp")]


def test_evicted_module_entry_is_a_clean_miss(bounded):
    meta = {"library": "fxc-0123abcd.so", "n_consts": 0}
    cache.write_entry("fxc-0123abcd.so", b"\x7fELF")
    cache.write_entry("modules/k.npz", b"")
    cache.write_entry("modules/k.ll.z", b"")
    cache.write_entry("modules/k.json", json.dumps(meta).encode())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        os.unlink(bounded / "modules/k.npz")                    # as eviction leaves it: one part gone
        assert module_cache.load_module("k") is None
        assert cache.read_entry("modules/k.npz") is None


BUILD = '''
import numpy as np
import fxc.driver.build as fb
from fxc.relay_like.graph import Graph
x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
for k in range(3):
    g = Graph()
    v = g.input((3, 5), "float32", "x")
    c = Graph.const(np.full((5,), k + 2.0, np.float32))
    g.outputs = [g.call1("sum", [g.call1("mul", [g.call1("tanh", [v]), c])], axes=(1,), keepdim=False)]
    np.testing.assert_allclose(fb.build(g)(x), (np.tanh(x) * (k + 2)).sum(1), rtol=1e-5, atol=1e-5)
print("ok")
'''


@pytest.mark.parametrize("bound", ["1", "0"])
def test_builds_are_right_on_a_tiny_bound_and_unbounded(bounded, bound):
    """A bound smaller than one entry (each write evicts all but recent entries) and no bound (0): fresh processes
    build and run correctly, twice (the second from what the cache kept)."""
    env = dict(os.environ, FXC_CACHE_DIR=str(bounded), FXC_CACHE_MAX_BYTES=bound, PYTHONPATH=str(ROOT))
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", BUILD], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-3000:]


def test_cli_cache_info_and_clear(bounded, capsys):
    from fxc.cli import main
    cache.write_entry("objects/a.o", b"a" * 100)
    cache.write_entry("modules/b.json", b"{}")
    assert main(["cache"]) == 0
    assert "2 entries" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert cache.read_entry("objects/a.o") is None and cache.stats()["entries"] == 0
