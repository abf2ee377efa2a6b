"""The browser harness of the browser targets (webgl, webgpu, wasm): one headless Chromium per process, driven by
Playwright from a thread of its own, with pages served from memory at a secure, cross-origin-isolated origin.

    browser = open_browser()            # Debian's /usr/bin/chromium (or $FXC_CHROMIUM), never a downloaded browser
    page = browser.page("webgl", [Path("runtime.js")], setup="() => ({...})")    # one page per name, made once
    page.info                           # what `setup` returned (a dict; {"error": ...} is a TargetError)
    page.call("(arg) => ...", arg)      # page.evaluate on the browser's thread; errors named (see Page.call)
    page.url                            # http://fxc.localhost/<name>/ (COOP/COEP: crossOriginIsolated is true)
    other = browser.visit("http://127.0.0.1:8000/")     # a page at a real URL (fxc serve's); .close() it
    other.wait_for("document.body.dataset.state !== 'loading'"); other.screenshot("page.png")

Takes nothing but Playwright (pip, the fxc[web] extra) and the system Chromium; produces pages in which a target's
JavaScript runtime runs. A page's files are served by Playwright's request routing (no socket): `index.html` and
the scripts given, with the COOP/COEP headers SharedArrayBuffer and wasm threads need; `http://*.localhost` is a
secure context, so WebGPU and SubtleCrypto are there too. Playwright's API is bound to the thread that started it:
every call runs on that one thread. Errors are named: TargetError (no Playwright, no Chromium, a page whose setup
reported something missing), CompileError (a shader or module the browser rejected), ExecutionError (anything
else the page threw).
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

from ..errors import CompileError, ExecutionError, TargetError
from .opengl import _GLThread

INSTALL = ("install Chromium and Playwright: on Debian `apt-get install chromium` (fonts-liberation too), and "
           "`pip install playwright` (the fxc[web] extra; never `playwright install`, fxc uses the system browser)")
# headless, as root too (Playwright gives the browser a fresh profile directory of its own); WebGL 2 on
# SwiftShader; WebGPU behind its flag
FLAGS = ["--headless=new", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
         "--ignore-gpu-blocklist", "--enable-unsafe-webgpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
ORIGIN = "http://fxc.localhost"
ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
             "Cross-Origin-Resource-Policy": "same-origin"}
TYPES = {".html": "text/html", ".js": "text/javascript", ".json": "application/json", ".wasm": "application/wasm",
         ".bin": "application/octet-stream", ".css": "text/css", ".png": "image/png"}
# a message from the page that means the browser refused generated code (a shader, a wasm module)
REJECTED = ("compile failed", "link failed", "CompileError", "createShaderModule")


class Page:
    """One page of the browser, its files served from memory; `call` runs JavaScript in it."""

    def __init__(self, browser: "Browser", name: str, files: dict | None, setup: str | None, url: str = ""):
        self.browser, self.name, self.url = browser, name, url or f"{ORIGIN}/{name}/"
        self.files = files              # path under the page's folder -> bytes (None: a real URL, not served here)
        self.info = browser.thread.run(self._open, setup)
        if isinstance(self.info, dict) and "error" in self.info:
            raise TargetError(f"the headless Chromium cannot run the {name} target: {self.info['error']} (flags: "
                              f"{' '.join(FLAGS)})")

    def _serve(self, route):
        path = route.request.url[len(self.url):].split("?", 1)[0] or "index.html"
        body = self.files.get(path)
        if body is None:
            return route.fulfill(status=404, body=b"", headers=ISOLATION)
        ctype = TYPES.get(Path(path).suffix, "application/octet-stream")
        return route.fulfill(status=200, body=body, headers={**ISOLATION, "Content-Type": ctype})

    def _open(self, setup):
        from playwright.sync_api import Error
        try:
            self.page = self.browser.context.new_page()
            if self.files is not None:
                self.page.route(f"{self.url}**", self._serve)
            self.page.goto(self.url)
            return self.page.evaluate(setup) if setup else {}
        except Error as e:
            raise TargetError(f"the headless Chromium did not open the {self.name} page ({e}); {INSTALL}") from None

    def call(self, script: str, arg=None):
        """page.evaluate(script, arg) on the browser's thread. A JavaScript error becomes a CompileError when the
        browser rejected generated code (its message says "compile failed" or "link failed"), else an
        ExecutionError."""
        def go():
            from playwright.sync_api import Error
            try:
                return self.page.evaluate(script, arg)
            except Error as e:
                msg = str(e)
                if any(w in msg for w in REJECTED):
                    raise CompileError(f"the browser rejected code generated for the {self.name} target",
                                       str(arg)[:2000], msg) from None
                raise ExecutionError(f"the {self.name} runtime failed in the page: {msg[:2000]}") from None
        return self.browser.thread.run(go)

    def wait_for(self, predicate: str, seconds: float = 600) -> None:
        """Wait until the JavaScript expression `predicate` is true in the page (an ExecutionError past `seconds`)."""
        def go():
            from playwright.sync_api import Error
            try:
                self.page.wait_for_function(predicate, timeout=seconds * 1000)
            except Error as e:
                raise ExecutionError(f"the {self.name} page: {predicate} did not hold within {seconds} s "
                                     f"({str(e)[:500]})") from None
        self.browser.thread.run(go)

    def screenshot(self, path) -> None:
        """A PNG of the whole page."""
        self.browser.thread.run(lambda: self.page.screenshot(path=str(path), full_page=True))

    def close(self) -> None:
        self.browser.thread.run(self.page.close)
        self.browser.pages.pop(self.name, None)


class Browser:
    """One headless Chromium (a Playwright browser context), driven from its own thread; its pages by name."""

    def __init__(self, executable: str):
        self.executable = executable
        self.thread = _GLThread("fxc-browser")
        self.version = self.thread.run(self._start)
        self.pages: dict = {}
        self._count = 0

    def _start(self) -> str:
        try:
            from playwright.sync_api import Error, sync_playwright
        except ImportError as e:
            raise TargetError(f"the browser targets need Playwright ({e}); {INSTALL}") from None
        if not os.access(self.executable, os.X_OK):
            raise TargetError(f"no Chromium at {self.executable} (set FXC_CHROMIUM to another); {INSTALL}")
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=self.executable, headless=True, args=FLAGS)
            self.context = self._browser.new_context()
        except Error as e:
            self._pw.stop()
            raise TargetError(f"Chromium at {self.executable} did not start ({e}); {INSTALL}") from None
        return self._browser.version

    def page(self, name: str, scripts: list = (), setup: str | None = None) -> Page:
        """The page `name` (made on first use): an index.html loading `scripts` (paths, in order), then `setup`
        evaluated once (its result is page.info)."""
        if name not in self.pages:
            files = {p.name: Path(p).read_bytes() for p in scripts}
            tags = "".join(f'<script src="{p.name}"></script>' for p in scripts)
            files["index.html"] = f"<!doctype html><html><head>{tags}</head><body></body></html>".encode()
            self.pages[name] = Page(self, name, files, setup)
        return self.pages[name]

    def visit(self, url: str, name: str = "visit") -> Page:
        """A new page at `url` (a real one: a server's, not served from memory); close() it when done."""
        page = self.pages[name] = Page(self, name, None, None, url)
        return page

    def new_id(self) -> int:
        """A number unique in this browser (a name for a model held in a page)."""
        self._count += 1
        return self._count


@functools.cache
def _open(executable: str) -> Browser:
    return Browser(executable)


def open_browser() -> Browser:
    """The process's headless Chromium (FXC_CHROMIUM names another executable than /usr/bin/chromium)."""
    return _open(os.environ.get("FXC_CHROMIUM", "/usr/bin/chromium"))
