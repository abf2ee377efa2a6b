"""`fxc serve-device`: build the fxc device server (fxc/runtime/cpu/device_server.c) for a machine and run it, so a
tuner or benchmark elsewhere measures artifacts on this machine (fxc/runtime/remote.py: measure_remote).

    fxc serve-device --port 9190 --host 0.0.0.0          # on the board (with fxc installed): build with gcc, serve
    fxc serve-device --target rasp4b64 -o fxc-device-server    # here: cross-build the server for a board without
                                                                 # Python, copy it there and run it

Takes a target (its triple picks the toolchain, fxc/backends/llvm/toolchain.py); produces the server's executable,
cached by the hash of its source and the triple.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from ..backends.llvm.toolchain import toolchain
from ..errors import CompileError
from ..runtime.store import atomic_write, cache_dir
from ..target import Target

SOURCE = Path(__file__).resolve().parents[1] / "runtime" / "cpu" / "device_server.c"


def build_server(target="llvm", out=None) -> Path:
    """The device server's executable for `target` (a Target or its string: its triple chooses the compiler; "llvm"
    this machine): `out` when given, else a file in the compile cache (built once per source and triple)."""
    triple = Target.parse(target).triple
    cc = toolchain(triple).cc
    src = SOURCE.read_bytes()
    path = Path(out) if out is not None else \
        cache_dir() / f"device-server-{hashlib.sha256(src + triple.encode()).hexdigest()[:16]}"
    if out is None and path.exists():
        return path
    with tempfile.TemporaryDirectory() as d:
        exe = Path(d) / "server"
        p = subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", str(SOURCE), "-o", str(exe), "-ldl"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise CompileError(f"{cc} could not build the device server", source=src.decode(), log=p.stderr)
        atomic_write(path, exe.read_bytes())
    os.chmod(path, 0o755)
    return path


def serve_device(host: str = "127.0.0.1", port: int = 9190, once: bool = False, run_limit: int = 600) -> int:
    """Build the server for this machine and run it in the foreground (until interrupted); its exit status.
    run_limit: seconds a model's run may take before its process is killed (a hung candidate's answer)."""
    cmd = [str(build_server()), "--host", host, "--port", str(port), "--run-limit", str(int(run_limit))] + \
        (["--once"] if once else [])
    try:
        return subprocess.run(cmd).returncode
    except KeyboardInterrupt:
        return 0


def cmd_serve_device(args) -> int:
    """`fxc serve-device`: with -o, cross-build the server for --target and print where; else serve here."""
    if args.output:
        path = build_server(args.target, args.output)
        print(f"wrote {path} (the fxc device server for {Target.parse(args.target).triple}); on the device run: "
              f"./{path.name} --host 0.0.0.0 --port {args.port} --run-limit {args.run_limit}")
        return 0
    print(f"building the fxc device server for this machine; serving on {args.host}:{args.port} (Ctrl-C stops)",
          flush=True)
    return serve_device(args.host, args.port, run_limit=args.run_limit)
