"""The thread that owns a device context (standard library only): a GL context is current in one thread, and
Playwright's API is bound to the thread that started it, so every call into such a device runs there.

    thread = DeviceThread("fxc-gl")
    thread.run(fn, *args)           # fn executed on that thread; its result returned or its exception raised here
"""
from __future__ import annotations

import queue
import threading


class DeviceThread:
    """The thread that owns a device context (GL, or the browser's driver): run(fn, *args) executes fn there and
    returns or raises its result."""

    def __init__(self, name: str = "fxc-gl"):
        self.q: queue.Queue = queue.Queue()
        self.name = name
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def _loop(self):
        while True:
            fn, args, box, done = self.q.get()
            try:
                box.append((True, fn(*args)))
            except BaseException as e:     # handed back to the caller's thread
                box.append((False, e))
            done.set()

    def run(self, fn, *args):
        if threading.current_thread().name == self.name:
            return fn(*args)
        box, done = [], threading.Event()
        self.q.put((fn, args, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value
