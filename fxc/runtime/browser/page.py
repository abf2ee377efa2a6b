"""The browser harness of the browser targets (webgl, webgpu, wasm): one headless Chromium per process, driven by
Playwright from a thread of its own, with pages served from memory at a secure, cross-origin-isolated origin.

    browser = open_browser()            # Debian's /usr/bin/chromium (or $FXC_CHROMIUM), never a downloaded browser
    page = browser.page("webgl", [Path("runtime.js")], setup="() => ({...})")    # one page per name, made once
    page.info                           # what `setup` returned (a dict; {"error": ...} is a TargetError)
    page.call("(arg) => ...", arg)      # page.evaluate on the browser's thread; errors named (see Page.call)
    page.url                            # http://127.0.0.1:<port>/<token>/<name>/ (COOP/COEP: crossOriginIsolated)
    page.put("x.bin", data)             # bytes the page can fetch("x.bin"); page.take("y.bin"): what it POSTed
    other = browser.visit("http://127.0.0.1:8000/")     # a page at a real URL (fxc serve's); .close() it
    other.wait_for("document.body.dataset.state !== 'loading'"); other.screenshot("page.png")

Takes nothing but Playwright (pip, the fxc[web] extra) and the system Chromium; produces pages in which a target's
JavaScript runtime runs. A page's files are served from memory by a small HTTP server of the browser's on
127.0.0.1 (a free port; every path under a random token): `index.html`, the scripts given, and the data a target
puts there (weights, inputs) — bulk data goes over that socket, not through Playwright's protocol, which moves
about 1 MB/s on this host; the page POSTs bulk results back the same way. Every response has the COOP/COEP headers
SharedArrayBuffer and wasm threads need; 127.0.0.1 is a secure context, so WebGPU and SubtleCrypto are there too.
Playwright's API is bound to the thread that started it:
every call runs on that one thread. Chromium keeps its sandbox (the page runs generated shaders and wasm) except
where it cannot have it: as root (Chromium refuses to start sandboxed there), or when FXC_CHROMIUM_SANDBOX=0 says
the host has none (no user namespaces); then one log line (logger "fxc", warning) says it is off and why
(`launch_options`). Errors are named: TargetError (no Playwright, no Chromium, a page whose setup
reported something missing), CompileError (a shader or module the browser rejected), ExecutionError (anything
else the page threw).
"""
from __future__ import annotations

import functools
import http.server
import logging
import os
import secrets
import threading
from pathlib import Path

from ...errors import CompileError, ExecutionError, TargetError
from ..thread import DeviceThread

INSTALL = ("install Chromium and Playwright: on Debian `apt-get install chromium` (fonts-liberation too), and "
           "`pip install playwright` (the fxc[web] extra; never `playwright install`, fxc uses the system browser)")
# headless (Playwright gives the browser a fresh profile directory of its own); WebGL 2 on SwiftShader; WebGPU
# behind its flag; the sandbox as launch_options says
FLAGS = ["--headless=new", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
         "--ignore-gpu-blocklist", "--enable-unsafe-webgpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
log = logging.getLogger("fxc")


def launch_options(uid: int, sandbox_opt_out: bool = False) -> tuple:
    """(Playwright launch keywords, why the sandbox is off or "") for a process of user `uid`: the sandbox stays on
    unless the user is root (Chromium will not start sandboxed as root) or the caller opted out (FXC_CHROMIUM_SANDBOX=0:
    a host without user namespaces, where the sandbox cannot start)."""
    why = ("this process runs as root, where Chromium refuses to start its sandbox; run fxc as another user to keep "
           "it" if uid == 0 else "FXC_CHROMIUM_SANDBOX=0 asked for it (a host where the sandbox cannot start)"
           if sandbox_opt_out else "")
    return {"args": FLAGS + (["--no-sandbox"] if why else []), "chromium_sandbox": not why}, why


def sandbox_options() -> tuple:
    """launch_options for this process (its user, FXC_CHROMIUM_SANDBOX), with a log line when the sandbox is off."""
    options, why = launch_options(os.geteuid(), os.environ.get("FXC_CHROMIUM_SANDBOX") == "0")
    if why:
        log.warning("fxc: Chromium runs without its sandbox, the pages' shaders and wasm unconfined: %s", why)
    return options, why
ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
             "Cross-Origin-Resource-Policy": "same-origin", "Cache-Control": "no-store"}
TYPES = {".html": "text/html", ".js": "text/javascript", ".json": "application/json", ".wasm": "application/wasm",
         ".bin": "application/octet-stream", ".css": "text/css", ".png": "image/png"}
# a message from the page that means the browser refused generated code (a shader, a wasm module)
REJECTED = ("compile failed", "link failed", "CompileError", "createShaderModule")


class Page:
    """One page of the browser, its files served from memory; `call` runs JavaScript in it."""

    def __init__(self, browser: "Browser", name: str, files: dict | None, setup: str | None, url: str = ""):
        self.browser, self.name = browser, name
        self.url = url or f"{browser.origin}/{name}/"
        self.files = files              # path under the page's folder -> bytes (None: a real URL, not served here)
        self.received: dict = {}        # path -> bytes the page POSTed
        self.lost = False               # its device is gone (a lost WebGL context): the target opens a fresh page
        if files is not None:
            browser.served[name] = self
        self.info = browser.thread.run(self._open, setup)
        if isinstance(self.info, dict) and "error" in self.info:
            raise TargetError(f"the headless Chromium cannot run the {name} target: {self.info['error']} (flags: "
                              f"{' '.join(browser.options['args'])})")

    def put(self, path: str, data: bytes) -> str:
        """Serve `data` at `path` under the page's folder (replacing what was there); returns the path."""
        self.files[path] = data
        return path

    def take(self, path: str) -> bytes:
        """The bytes the page POSTed to `path` (removed from the server), or an ExecutionError."""
        data = self.received.pop(path, None)
        if data is None:
            raise ExecutionError(f"the {self.name} page sent nothing to {path}")
        return data

    def _open(self, setup):
        from playwright.sync_api import Error  # deferred: playwright is optional (the fxc[web] extra)
        try:
            self.page = self.browser.context.new_page()
            self.page.goto(self.url)
            return self.page.evaluate(setup) if setup else {}
        except Error as e:
            raise TargetError(f"the headless Chromium did not open the {self.name} page ({e}); {INSTALL}") from None

    def call(self, script: str, arg=None):
        """page.evaluate(script, arg) on the browser's thread. A JavaScript error becomes a CompileError when the
        browser rejected generated code (its message says "compile failed" or "link failed"), else an
        ExecutionError."""
        def go():
            from playwright.sync_api import Error  # deferred: playwright is optional (the fxc[web] extra)
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
            from playwright.sync_api import Error  # deferred: playwright is optional (the fxc[web] extra)
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
        self.browser.served.pop(self.name, None)


class _Files(http.server.BaseHTTPRequestHandler):
    """GET: a page's file from memory; POST: bytes the page sends back (kept in page.received)."""

    disable_nagle_algorithm = True      # a reply's headers and body go out at once: with Nagle on, the body waited
    #                                     for the browser's delayed ACK of the headers (~40 ms a call on loopback)

    def _page(self):
        parts = self.path.split("?", 1)[0].split("/", 3)      # "", token, page, path
        browser = self.server.browser
        if len(parts) < 3 or parts[1] != browser.token or parts[2] not in browser.served:
            self._reply(404, b"")
            return None, ""
        return browser.served[parts[2]], (parts[3] if len(parts) > 3 else "") or "index.html"

    def _reply(self, status: int, body: bytes, ctype: str = "application/octet-stream"):
        self.send_response(status)
        for k, v in {**ISOLATION, "Content-Type": ctype, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        page, path = self._page()
        if page is not None:
            body = page.files.get(path)
            if body is None:
                self._reply(404, b"")
            else:
                self._reply(200, body, TYPES.get(Path(path).suffix, "application/octet-stream"))

    def do_POST(self):
        page, path = self._page()
        if page is not None:
            page.received[path] = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._reply(200, b"")

    def log_message(self, fmt, *args):
        pass


class Browser:
    """One headless Chromium (a Playwright browser context), driven from its own thread; its pages by name, served
    by a loopback HTTP server of its own."""

    def __init__(self, executable: str):
        self.executable = executable
        self.thread = DeviceThread("fxc-browser")
        self.version = self.thread.run(self._start)
        self.pages: dict = {}
        self.served: dict = {}
        self._count = 0
        self.token = secrets.token_hex(8)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
        self.httpd.daemon_threads = True
        self.httpd.browser = self
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}/{self.token}"
        threading.Thread(target=self.httpd.serve_forever, name="fxc-browser-files", daemon=True).start()

    def _start(self) -> str:
        try:
            from playwright.sync_api import Error, sync_playwright  # deferred: playwright is optional
        except ImportError as e:
            raise TargetError(f"the browser targets need Playwright ({e}); {INSTALL}") from None
        if not os.access(self.executable, os.X_OK):
            raise TargetError(f"no Chromium at {self.executable} (set FXC_CHROMIUM to another); {INSTALL}")
        self.options, why = sandbox_options()
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=self.executable, headless=True, **self.options)
            self.context = self._browser.new_context()
        except Error as e:
            self._pw.stop()
            hint = (" Chromium could not start its sandbox here: enable unprivileged user namespaces (sysctl "
                    "kernel.unprivileged_userns_clone=1), or set FXC_CHROMIUM_SANDBOX=0 to run it unconfined;"
                    if "sandbox" in str(e).lower() and not why else "")
            raise TargetError(f"Chromium at {self.executable} did not start ({e});{hint} {INSTALL}") from None
        return self._browser.version

    def page(self, name: str, scripts: list = (), setup: str | None = None) -> Page:
        """The page `name` (made on first use): an index.html loading `scripts` (paths, in order), then `setup`
        evaluated once (its result is page.info)."""
        if name not in self.pages:
            names = [f"{Path(p).parent.name}-{Path(p).name}" for p in scripts]     # webgl/ and wasm/ runtime.js
            files = {n: Path(p).read_bytes() for n, p in zip(names, scripts)}
            tags = "".join(f'<script src="{n}"></script>' for n in names)
            files["index.html"] = f"<!doctype html><html><head>{tags}</head><body></body></html>".encode()
            self.pages[name] = Page(self, name, files, setup)
        return self.pages[name]

    def visit(self, url: str, name: str = "visit") -> Page:
        """A new page at `url` (a real one: a server's, not served from memory); close() it when done."""
        self.pages[name] = Page(self, name, None, None, url)
        return self.pages[name]

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
