"""Measure and run a CPU artifact on another machine through its fxc device server (runtime/cpu/device_server.c,
started there by `fxc serve-device`), as TVM's RPC measures on a Raspberry Pi: the artifact's library and params go
over TCP, its timings (and outputs) come back.

    costs = measure_remote("model.fxc", "tcp://pi.local:9190", number=10, repeat=3)   # seconds per run, x repeat
    outputs, costs = run_remote("model.fxc", "127.0.0.1:9190", [x])                    # numpy in, numpy out

A tuner measures a candidate by exporting it and calling measure_remote (the interface of a local measurer: a
list of `repeat` costs, each the mean of `number` runs). Imports only the standard library, numpy and the
artifact reader; the protocol is described in device_server.c.
"""
from __future__ import annotations

import socket
import struct

import numpy as np

from ..errors import ExecutionError, InputError
from .artifact.read import LIBRARY, PARAMS, read_artifact
from .tensors import TensorSpec, check_inputs, np_dtype

PROTOCOL = 1
DEFAULT_PORT = 9190


class DeviceUnreachable(ExecutionError):
    """The device server cannot be reached (down, wrong address) or dropped the connection mid-answer."""


class DeviceTimeout(ExecutionError):
    """The device server gave no answer within the timeout (a model that hangs, or a server busy with one)."""


def parse_address(address) -> tuple:
    """(host, port) from "tcp://host:port", "host:port", "host" (DEFAULT_PORT) or a (host, port) pair."""
    if isinstance(address, tuple):
        return str(address[0]), int(address[1])
    text = str(address).removeprefix("tcp://")
    host, _, port = text.rpartition(":") if ":" in text else (text, "", str(DEFAULT_PORT))
    if not host or not port.isdigit():
        raise InputError(f"device address {address!r} is not tcp://host:port (e.g. tcp://raspberrypi.local:9190)")
    return host.strip("[]"), int(port)


def measure_remote(artifact_path, address, number: int = 10, repeat: int = 3, threads: int = 0,
                   timeout: float = 600.0) -> list:
    """The artifact's run time on the device server at `address`: `repeat` costs in seconds, each the mean of
    `number` runs after one warm-up run, on zero-filled inputs (threads: the library's thread count, 0 all cores).
    ExecutionError for a server that refuses the model (its message); its DeviceUnreachable for one that cannot be
    reached, DeviceTimeout for one that gives no answer within `timeout` seconds."""
    return _request(artifact_path, address, number, repeat, threads, None, timeout)[1]


def run_remote(artifact_path, address, inputs: list, number: int = 1, repeat: int = 1, threads: int = 0,
               timeout: float = 600.0) -> tuple:
    """(outputs as numpy arrays, costs) of the artifact run on `inputs` (numpy arrays of its signature) by the
    device server at `address`; see measure_remote."""
    return _request(artifact_path, address, number, repeat, threads, list(inputs), timeout)


def _request(artifact_path, address, number, repeat, threads, inputs, timeout) -> tuple:
    manifest, parts = read_artifact(artifact_path)
    if LIBRARY not in parts:
        raise InputError(f"{artifact_path}: a {manifest.get('target')} artifact has no CPU library; the device "
                         f"server runs llvm artifacts (an ARM board's: target rasp4b64, ...)")
    specs = lambda key: [TensorSpec(s["name"], tuple(s["shape"]), s["dtype"]) for s in manifest[key]]  # noqa: E731
    ins = check_inputs(specs("inputs"), inputs) if inputs is not None else []
    if number < 1 or repeat < 1:
        raise InputError(f"number and repeat must be at least 1, got {number} and {repeat}")
    head = b"FXCQ" + struct.pack("<6I", PROTOCOL, number, repeat, threads, len(ins), inputs is not None)
    blobs = [parts[LIBRARY], parts[PARAMS]] + [np.ascontiguousarray(a).tobytes() for a in ins]
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(head + b"".join(struct.pack("<Q", len(b)) + b for b in blobs))
            f = s.makefile("rb")
            if f.read(4) != b"FXCR":
                raise ExecutionError(f"{host}:{port} is not an fxc device server (start one with `fxc "
                                     f"serve-device`)")
            status, message = _u32(f), _blob(f).decode(errors="replace")
            n = _u32(f)
            costs = list(struct.unpack(f"<{n}d", _exact(f, 8 * n)))
            outs = [_blob(f) for _ in range(_u32(f))]
    except TimeoutError:
        raise DeviceTimeout(f"the fxc device server at {host}:{port} gave no answer in {timeout:.0f} s (a model "
                            f"that hangs, or a server still busy with one: restart `fxc serve-device` there)") \
            from None
    except OSError as e:
        raise DeviceUnreachable(f"cannot reach the fxc device server at {host}:{port} ({e}); start it on the device "
                             f"with `fxc serve-device --host 0.0.0.0 --port {port}`") from None
    if status != 0:
        raise ExecutionError(f"the device server at {host}:{port} could not run {artifact_path}: {message}")
    outputs = [np.frombuffer(b, np_dtype(spec.dtype)).reshape(spec.shape) for b, spec in zip(outs, specs("outputs"))]
    return outputs, costs


def _exact(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise OSError("the device server closed the connection mid-answer")
    return data


def _u32(f) -> int:
    return struct.unpack("<I", _exact(f, 4))[0]


def _blob(f) -> bytes:
    return _exact(f, struct.unpack("<Q", _exact(f, 8))[0])
