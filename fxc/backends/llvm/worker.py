"""A compile worker process for the `llvm` target: `python -m fxc.backends.llvm.worker`.

llvmlite runs every LLVM call of a process under one lock, so parts of a module compile in parallel only in
separate processes (fxc.backends.llvm.compile starts them and feeds them parts). The worker first writes its host
CPU (its machine spec, "triple\ncpu\nfeatures") so the parent can check it runs the same LLVM on the same host,
then answers requests until its stdin closes. Every message is a kind byte, an 8-byte little-endian length and
that many bytes (compile.send_message, compile.read_message):
    request  b"K" + spec + NUL + LLVM IR text (a kernel part: the kernels' pipeline)  or  b"E" + ... (no IR
             passes); spec: the target machine the part is for, "triple\ncpu\nfeatures" (compile.machine_spec)
    answer   b"O" + object code  or  b"X" + the error message
"""
from __future__ import annotations

import sys

from . import compile as llvm


def main() -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    llvm.send_message(out, b"H", llvm.machine_spec().encode())
    while True:
        kind, text = llvm.read_message(inp)
        if kind is None:
            return
        try:
            spec, _, ir = text.decode().partition("\0")
            llvm.send_message(out, b"O", llvm._compile_part(ir, kind == b"K", spec))
        except Exception as e:          # reported to the parent, which compiles the part itself
            llvm.send_message(out, b"X", f"{type(e).__name__}: {e}".encode())


if __name__ == "__main__":
    main()
