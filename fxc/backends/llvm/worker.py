"""A compile worker process for the `llvm` target: `python -m fxc.backends.llvm.worker`.

llvmlite runs every LLVM call of a process under one lock, so parts of a module compile in parallel only in
separate processes. The worker first writes its host CPU (name and features) so the parent can check it
runs the same LLVM on the same host, then answers requests until its stdin closes. Every message is a kind byte, an
8-byte little-endian length and that many bytes:
    request  b"K" + spec + NUL + LLVM IR text (a kernel part: the kernels' pipeline)  or  b"E" + ... (no IR
             passes); spec: the target machine the part is for, "triple\ncpu\nfeatures" (llvm.machine_spec)
    answer   b"O" + object code  or  b"X" + the error message
"""
from __future__ import annotations

import struct
import sys


def write(out, kind: bytes, payload: bytes) -> None:
    out.write(kind + struct.pack("<Q", len(payload)) + payload)
    out.flush()


def read(inp) -> tuple:
    """(kind, payload), or (None, None) at the end of the stream."""
    head = inp.read(9)
    if len(head) < 9:
        return None, None
    kind, n = head[:1], struct.unpack("<Q", head[1:])[0]
    payload = inp.read(n)
    if len(payload) < n:
        return None, None
    return kind, payload


def host() -> bytes:
    from .compile import target_machine
    _, triple, cpu, features = target_machine()
    return f"{triple}\n{cpu}\n{features}".encode()


def main() -> None:
    from .compile import _compile_part
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    write(out, b"H", host())
    while True:
        kind, text = read(inp)
        if kind is None:
            return
        try:
            spec, _, ir = text.decode().partition("\0")
            write(out, b"O", _compile_part(ir, kind == b"K", spec))
        except Exception as e:          # reported to the parent, which compiles the part itself
            write(out, b"X", f"{type(e).__name__}: {e}".encode())


if __name__ == "__main__":
    main()
