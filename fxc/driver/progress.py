"""The progress line of a long build on a terminal: "[fxc] llvm: compiling kernels 12/40  5.1 s".

Takes the stages a build reports (`Progress.set`: the passes, lowering k of n groups, the compile workers' count,
linking); produces one line on stderr, redrawn in place four times a second by a thread of its own, from DELAY
seconds after the build started (a short build shows nothing) until it ends (the line is then cleared). Off when
stderr is not a terminal, or with FXC_PROGRESS=0; FXC_PROGRESS=<seconds> sets the delay. One line at a time: the
newest running Progress draws it (a build inside `fxc compile`'s own stages, an early build in its own thread), the
one before it again once that one ends. Standard library only.
"""
from __future__ import annotations

import os
import sys
import threading
import time

DELAY = 2.0             # seconds a build runs before its line shows
TICK = 0.25
_running: list = []             # the Progress objects not closed yet, oldest first: the last one draws the line
_lock = threading.Lock()        # guards _running and every write to the terminal


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
    """The progress of one build (what: e.g. its target kind), or of a command's stages."""

    def __init__(self, what: str, stream=None):
        self.what, self.stream = what, stream or sys.stderr
        self.stage, self.done, self.total, self.count = "starting", 0, 0, None
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._shown = False             # this Progress drew on the terminal (its line is cleared at the end)
        self._thread = None
        delay = _delay()
        isatty = getattr(self.stream, "isatty", None)
        if delay is not None and isatty is not None and isatty():
            with _lock:
                _running.append(self)
            self._thread = threading.Thread(target=self._run, args=(delay,), name="fxc-progress", daemon=True)
            self._thread.start()

    def set(self, stage: str, done: int = 0, total: int = 0, count=None) -> None:
        """Now in `stage`, `done` of `total` (0: no count); count: a function giving (done, total) when another
        thread counts (the compile workers)."""
        self.stage, self.done, self.total, self.count = stage, done, total, count
        if self._shown:             # drawn at once: a stage shorter than a tick shows too
            self._draw()

    def line(self) -> str:
        done, total = self.count() if self.count is not None else (self.done, self.total)
        n = f" {done}/{total}" if total else ""
        return f"[fxc] {self.what}: {self.stage}{n}  {time.perf_counter() - self.t0:.1f} s"

    def _run(self, delay: float) -> None:
        if self._stop.wait(delay):
            return
        self._shown = True
        while not self._stop.is_set():
            self._draw()
            self._stop.wait(TICK)

    def _draw(self) -> None:
        with _lock:
            if _running and _running[-1] is self and not self._stop.is_set():
                self._write(f"\r{self.line()}\x1b[K")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):       # a closed or broken terminal: no more progress
            self._stop.set()

    def close(self) -> None:
        """The build ended: its line (if it showed) is cleared before this returns, and the Progress it ran inside
        (if any) draws again at its next tick."""
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join()
        with _lock:
            top = _running[-1] is self
            _running.remove(self)
            if self._shown and top:
                self._write("\r\x1b[K")
