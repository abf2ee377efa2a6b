"""The device server (fxc/runtime/cpu/device_server.c) stops a model's run that passes its --run-limit and answers
so, and stays free for the next request: a candidate that hangs on a board costs one answer, not the server."""
from __future__ import annotations

import socket
import struct
import subprocess

from fxc.deploy.device_server import build_server

HANGS = r"""
#include <unistd.h>
typedef struct { const char *name; int dtype, ndim; const long long *shape; unsigned long long nbytes; } info;
static info none;
int fxc_init(const char *dir) { (void)dir; for (;;) sleep(1); }
int fxc_main(const void **in, void **out) { (void)in; (void)out; return 0; }
int fxc_num_inputs(void) { return 0; }
int fxc_num_outputs(void) { return 0; }
const info *fxc_input_info(int i) { (void)i; return &none; }
const info *fxc_output_info(int i) { (void)i; return &none; }
const char *fxc_last_error(void) { return ""; }
void fxc_free(void) {}
"""


def _ask(port: int, library: bytes) -> tuple:
    """(status, message) of one request carrying `library` (no params, no inputs)."""
    head = b"FXCQ" + struct.pack("<6I", 1, 1, 1, 1, 0, 0)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head + b"".join(struct.pack("<Q", len(b)) + b for b in (library, b"")))
        f = s.makefile("rb")
        assert f.read(4) == b"FXCR"
        status = struct.unpack("<I", f.read(4))[0]
        message = f.read(struct.unpack("<Q", f.read(8))[0]).decode()
    return status, message


def test_a_hanging_run_is_stopped_at_the_limit_and_the_server_answers_the_next(tmp_path):
    src = tmp_path / "hangs.c"
    src.write_text(HANGS)
    lib = tmp_path / "libhangs.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    server = subprocess.Popen([str(build_server()), "--port", "0", "--run-limit", "1"], stdout=subprocess.PIPE,
                              text=True)
    try:
        port = int(server.stdout.readline().rsplit(":", 1)[1])
        for _ in range(2):          # the second request is served too: the hung run did not keep the server
            status, message = _ask(port, lib.read_bytes())
            assert status != 0 and "took longer than 1 s" in message and "--run-limit" in message, message
    finally:
        server.kill()
        server.wait()
