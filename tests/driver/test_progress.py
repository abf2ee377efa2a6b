"""The progress line of a long build (fxc/driver/progress.py), on a real pseudo-terminal: it shows the stage and the
kernels built/total once the build runs past the delay, is cleared at the end, and stays off on a pipe or when
asked (FXC_PROGRESS=0)."""
import os
import pty
import subprocess
import sys
import time

from fxc.driver.progress import Progress

BUILD = """
import torch, fxc
torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
                          for _ in range(6)], torch.nn.Flatten(), torch.nn.Linear(8 * 64, 4)).eval()
x = torch.randn(1, 8, 8, 8)
torch.testing.assert_close(fxc.from_torch(m, (x,))(x), m(x), rtol=1e-4, atol=1e-5)
print("done")
"""


def _run_on_pty(env: dict) -> str:
    """The build's stdout and stderr as a terminal shows them."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-c", BUILD], stdin=slave, stdout=slave, stderr=slave,
                         env=dict(os.environ, FXC_MODULE_CACHE="0", **env))
    os.close(slave)
    out = _read_all(master)
    assert p.wait(timeout=300) == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


def _read_all(master: int) -> bytes:
    """What the terminal got, until every writer closed it."""
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:         # the writers closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out


def test_build_shows_progress_on_a_terminal(tmp_path):
    out = _run_on_pty({"FXC_PROGRESS": "0.01", "FXC_CACHE_DIR": str(tmp_path)})     # (a cache of its own: a build)
    lines = [seg for seg in out.split("\r") if seg.startswith("[fxc] llvm: ")]
    assert lines, out
    assert any("compiling kernels" in s or "lowering kernels" in s for s in lines), lines
    counted = [s for s in lines if " kernels " in s and "/" in s]
    for s in counted:           # "[fxc] llvm: compiling kernels 3/5  1.2 s"
        done, total = s.split(" kernels ")[1].split()[0].split("/")
        assert 0 <= int(done) <= int(total), s
    assert out.rstrip("\r\n").endswith("done") and "\r\x1b[K" in out       # the line was cleared before the end


def test_no_progress_on_a_pipe():
    p = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, FXC_MODULE_CACHE="0", FXC_PROGRESS="0.01"))
    assert p.returncode == 0 and "[fxc] llvm:" not in p.stderr, p.stderr


def test_progress_delay_off_and_nested_lines(monkeypatch):
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        monkeypatch.delenv("FXC_PROGRESS", raising=False)
        quick = Progress("llvm", tty)           # ends before the default delay (2 s)
        quick.set("lowering kernels", 1, 3)
        quick.close()
        monkeypatch.setenv("FXC_PROGRESS", "0")     # asked off
        off = Progress("wasm", tty)
        time.sleep(0.1)
        off.close()
        monkeypatch.setenv("FXC_PROGRESS", "0.01")
        outer = Progress("fxc compile", tty)
        outer.set("tracing the model")
        time.sleep(0.6)                         # (a few of the 0.25 s redraw ticks each, on a loaded host too)
        inner = Progress("llvm", tty)           # a build inside the command's stage: its line takes over
        inner.set("compiling kernels", count=lambda: (2, 5))
        time.sleep(0.6)
        inner.close()                           # cleared; the command's line comes back
        time.sleep(1.2)
        outer.close()
    text = _read_all(master).decode()
    assert "[fxc] llvm: compiling kernels 2/5" in text
    assert "wasm" not in text and "lowering" not in text
    first, during, after = text.index("fxc compile: tracing"), text.index("llvm: compiling"), \
        text.rindex("fxc compile: tracing")
    assert first < during < after and text.index("\r\x1b[K", during) < after
    assert text.endswith("\r\x1b[K"), repr(text[-80:])
