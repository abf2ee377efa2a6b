"""`fxc serve` and `fxc web` against hostile pages and careless folders (issue 41, items 10-12), over real sockets
on 127.0.0.1: only the regular files package.json lists are served (no listings, no links out, no other files, and
package.json cannot widen that); only requests to the server's own Host are answered (DNS rebinding); idle and
half-sent connections are closed after the timeout and at most MAX_CONNECTIONS hold a thread; `fxc web` refuses a
non-empty folder that is not an earlier package, as `fxc extract` does."""
import http.client
import json
import os
import shutil
import socket
import threading
import time

import pytest

import fxc
from fxc.cli import main as cli
from fxc.deploy.web import MAX_CONNECTIONS, PACKAGE_FILES, serve, write_package
from fxc.driver.build import build
from fxc.errors import FxcError
from fxc.relay_like.builder import Builder


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """(webgl artifact, a package written from it, a secret file beside the package)."""
    d = tmp_path_factory.mktemp("web")
    b = Builder()
    v = b.graph.input((8,), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    path = fxc.export(build(b.graph, target="webgl"), d / "m.fxc")
    site = write_package(path, d / "site", runs=1).parent
    (d / "secret.txt").write_text("the user's secret")
    return path, site, d / "secret.txt"


def _site(package, tmp_path):
    shutil.copytree(package[1], tmp_path / "site")
    return tmp_path / "site"


def _get(server, path, host=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        c.putrequest(method, path, skip_host=True)
        c.putheader("Host", f"127.0.0.1:{server.port}" if host is None else host)
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_package_lists_its_files(package):
    _, site, _ = package
    listed = json.loads((site / "package.json").read_text())["files"]
    assert set(listed) == {p.name for p in site.iterdir()} and set(listed) <= PACKAGE_FILES


def test_serves_only_the_listed_regular_files(package, tmp_path):
    site = _site(package, tmp_path)
    secret = package[2]
    (site / "notes.txt").write_text("not part of the package")
    (site / "weights.bin").unlink()
    (site / "weights.bin").symlink_to(secret)               # a listed name, but a link out
    (site / "sub").mkdir()
    (site / "sub" / "x.txt").write_text("x")
    with serve(site) as server:
        status, body = _get(server, "/")
        assert status == 200 and body == (site / "index.html").read_bytes()
        assert _get(server, "/package.json?x=1")[0] == 200 and _get(server, "/layout.json")[0] == 200
        for path in ("/notes.txt", "/weights.bin", "/sub", "/sub/", "/sub/x.txt", "/../secret.txt",
                     "/%2e%2e/secret.txt", "//etc/passwd", "/index.html/", "/.", "/./index.html"):
            status, body = _get(server, path)
            assert status == 404 and b"secret" not in body and b"Directory" not in body, (path, status, body)
        status, body = _get(server, "/", method="HEAD")
        assert status == 200 and body == b""
        assert _get(server, "/", method="POST")[0] == 501


def test_package_json_cannot_widen_what_is_served(package, tmp_path):
    site = _site(package, tmp_path)
    pkg = json.loads((site / "package.json").read_text())
    pkg["files"] += ["notes.txt", "../secret.txt", "/etc/passwd"]
    (site / "package.json").write_text(json.dumps(pkg))
    (site / "notes.txt").write_text("not part of the package")
    with serve(site) as server:
        for path in ("/notes.txt", "/../secret.txt", "/etc/passwd", "//etc/passwd"):
            assert _get(server, path)[0] == 404, path


def test_answers_only_its_own_host(package):
    _, site, _ = package
    with serve(site) as server:
        for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", f"LOCALHOST:{server.port}",
                     f"[::1]:{server.port}"):
            assert _get(server, "/", host)[0] == 200, host
        for host in (f"attacker.example:{server.port}", "127.0.0.1", f"127.0.0.1:{server.port + 1}",
                     f"127.0.0.1.attacker.example:{server.port}", ""):
            status, body = _get(server, "/package.json", host)
            assert status == 421 and b"weights" not in body, host
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:     # no Host at all
            s.sendall(b"GET /package.json HTTP/1.0\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.0 421")


def _closed(s: socket.socket) -> bool:
    """True once the server has closed the connection (EOF or reset); False if it is still open at the timeout."""
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_half_sent_requests_are_bounded_and_timed_out(package):
    _, site, _ = package
    before = threading.active_count()
    with serve(site, timeout=1.0) as server:
        socks = []
        try:
            for _ in range(300):
                s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode())     # never finished
                socks.append(s)
            time.sleep(0.3)
            held = threading.active_count() - before
            assert held <= MAX_CONNECTIONS + 1, held          # + the serving thread
            deadline = time.monotonic() + 10
            while threading.active_count() - before > 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert threading.active_count() - before <= 1     # every half-sent request timed out
            for s in socks:
                s.settimeout(5)
                assert _closed(s)
            assert _get(server, "/")[0] == 200                # and the server still answers
        finally:
            for s in socks:
                s.close()


def test_an_idle_connection_is_closed(package):
    _, site, _ = package
    with serve(site, timeout=0.5) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            t0 = time.monotonic()
            assert _closed(s) and time.monotonic() - t0 < 5


def test_web_refuses_a_folder_that_is_not_a_package(package, tmp_path, capsys):
    path, _, _ = package
    project = tmp_path / "proj"
    project.mkdir()
    (project / "main.py").write_text("print('my project')")
    with pytest.raises(FxcError, match="not empty and is not an earlier fxc web package .*main.py"):
        write_package(path, project)
    assert sorted(p.name for p in project.iterdir()) == ["main.py"]
    assert cli(["web", str(path), str(project)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fxc: error:") and "Traceback" not in err and "not empty" in err
    lookalike = tmp_path / "lookalike"        # only package names, but no fxc-web package.json
    lookalike.mkdir()
    (lookalike / "index.html").write_text("<p>my page</p>")
    with pytest.raises(FxcError, match="not an earlier fxc web package"):
        write_package(path, lookalike)
    assert (lookalike / "index.html").read_text() == "<p>my page</p>"


def test_web_rewrites_an_earlier_package(package, tmp_path):
    path, _, secret = package
    site = _site(package, tmp_path)
    (site / "module.wasm").write_bytes(b"\0asm stale")      # a file an earlier (mixed) package had
    write_package(path, site, runs=2)
    assert json.loads((site / "package.json").read_text())["runs"] == 2
    assert not (site / "module.wasm").exists()
    (site / "sample.bin").unlink()
    (site / "sample.bin").symlink_to(secret)                # a link among the package's names: not ours
    with pytest.raises(FxcError, match="not an earlier fxc web package"):
        write_package(path, site)
    assert secret.read_text() == "the user's secret"


def test_serve_refuses_a_folder_without_a_file_list(package, tmp_path):
    site = _site(package, tmp_path)
    pkg = json.loads((site / "package.json").read_text())
    del pkg["files"]                                        # a package of an older fxc
    (site / "package.json").write_text(json.dumps(pkg))
    with pytest.raises(FxcError, match="older fxc versions list none"):
        serve(site)
    with pytest.raises(FxcError, match="no index.html"):
        serve(tmp_path)
    assert os.path.isdir(site)
