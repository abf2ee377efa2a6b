"""The progress line of a long build on a terminal: "[fxc] llvm: compiling kernels 12/40  5.1 s".

Takes the stages a build reports (`Progress.set`: the passes, lowering k of n groups, the compile workers' count,
linking); produces one line on stderr, redrawn in place four times a second by a thread of its own, from DELAY
seconds after the build started (a short build shows nothing) until it ends (the line is then cleared). Off when
stderr is not a terminal, or with FXC_PROGRESS=0; FXC_PROGRESS=<seconds> sets the delay. One line at a time: a build
that starts while another's line shows (an early build in its own thread) stays silent. Standard library only.
"""
from __future__ import annotations

import os
import sys
import threading
import time

DELAY = 2.0             # seconds a build runs before its line shows
TICK = 0.25
_showing = threading.Lock()     # held by the build whose line is on the terminal


def _delay() -> float | None:
    """FXC_PROGRESS: unset -> DELAY, "0" (or "off") -> None (no line), a number -> that delay in seconds."""
    text = os.environ.get("FXC_PROGRESS", "").strip().lower()
    if not text:
        return DELAY
    if text in ("0", "off", "no", "false"):
        return None
    try:
        return max(float(text), 0.0)
    except ValueError:
        return DELAY


class Progress:
    """The progress of one build (what: e.g. its target kind)."""

    def __init__(self, what: str, stream=None):
        self.what, self.stream = what, stream or sys.stderr
        self.stage, self.done, self.total, self.count = "starting", 0, 0, None
        self.t0 = time.perf_counter()
        delay = _delay()
        self._stop = threading.Event()
        self._live = False              # this build's line is on the terminal
        self._lock = threading.Lock()   # one writer at a time: the ticking thread, a set()
        self._thread = None
        isatty = getattr(self.stream, "isatty", None)
        if delay is not None and isatty is not None and isatty():
            self._thread = threading.Thread(target=self._run, args=(delay,), name="fxc-progress", daemon=True)
            self._thread.start()

    def set(self, stage: str, done: int = 0, total: int = 0, count=None) -> None:
        """Now in `stage`, `done` of `total` (0: no count); count: a function giving (done, total) when another
        thread counts (the compile workers)."""
        self.stage, self.done, self.total, self.count = stage, done, total, count
        if self._live:              # drawn at once: a stage shorter than a tick shows too
            self._write(f"\r{self.line()}\x1b[K")

    def line(self) -> str:
        done, total = self.count() if self.count is not None else (self.done, self.total)
        n = f" {done}/{total}" if total else ""
        return f"[fxc] {self.what}: {self.stage}{n}  {time.perf_counter() - self.t0:.1f} s"

    def _run(self, delay: float) -> None:
        if self._stop.wait(delay) or not _showing.acquire(blocking=False):
            return
        self._live = True
        try:
            while True:
                self._write(f"\r{self.line()}\x1b[K")
                if self._stop.wait(TICK):
                    break
            self._live = False
            self._write("\r\x1b[K")
        finally:
            _showing.release()

    def _write(self, text: str) -> None:
        with self._lock:
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):       # a closed or broken terminal: no more progress
                self._live = False
                self._stop.set()

    def close(self) -> None:
        """The build ended: the line (if it showed) is cleared before this returns."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
