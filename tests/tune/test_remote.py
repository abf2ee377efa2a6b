"""Tuning through an fxc device server (`fxc tune --device tcp://...`): the server cross-built for a Raspberry Pi 4
(rasp4b64, aarch64) and run under qemu-aarch64 on 127.0.0.1 measures a few trials of a small model; the records carry
the board's target key and a compile for the board applies them; a server that never answers is a "hang", one that
is gone is "lost" (and the tuner stops with a message); a host target with a device is refused."""
import json
import socket
import subprocess
from dataclasses import asdict

import numpy as np
import pytest

import fxc
from fxc import cli
from fxc.backends import fill
from fxc.errors import FxcError
from fxc.target import Target
from fxc.tuning.frontends import graph_of
from fxc.tuning.log import best_for_target, read
from fxc.tuning.measure import MeasureParams, measure, run_batch
from fxc.tuning.tasks import extract_tasks
from fxc.tuning.workload import target_key
from tests.backends.llvm.arm import require_cross
from tests.tune.models import small

BOARD = "rasp4b64"
FAST = MeasureParams(repeat=2, min_repeat_ms=1, timeout_s=120)


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    """The device server for the board, under qemu-aarch64 on 127.0.0.1 (any free port): its address."""
    chain = require_cross(BOARD)
    exe = tmp_path_factory.mktemp("server") / "server"
    assert cli.main(["serve-device", "--target", BOARD, "-o", str(exe)]) == 0
    server = subprocess.Popen([*chain.emulator(), str(exe), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        yield "tcp://127.0.0.1:" + server.stdout.readline().rsplit(":", 1)[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_tune_through_the_device_server(device, tmp_path):
    m, x = small()
    log = tmp_path / "rasp.jsonl"
    r = fxc.tune(m, x, target=BOARD, trials=9, batch=3, log=log, params=FAST, device=device, progress=False)
    assert r.trials == 9 and not r.errors, r
    records = [rec for rec in read(log) if not rec.get("confirmed")]      # (the measurements)
    tkey = target_key(fill(Target.parse(BOARD)))
    assert len(records) == 9 and {rec["target"] for rec in records} == {tkey}
    assert all(rec["error"] is None and len(rec["costs"]) == 2 and min(rec["costs"]) > 0 for rec in records)
    assert tkey != target_key(fill(Target.parse("llvm")))           # never applied to the host's builds
    assert any(not rec["desc"].endswith("winograd") for rec in records)  # (the conv's form first, then groups)
    assert best_for_target(log, tkey)[0]                           # a compile for the board applies them
    compiled = fxc.from_torch(m, x, target=BOARD, tuning_log=str(log))
    # the groups' trials went to the conv form that measured fastest alone; where the whole-model confirmation
    # (the board's timing) drops that form, the build's groups are the other form's, which nothing measured
    dropped_form = r.confirmation is not None and any(d.endswith("winograd") for d in r.confirmation.dropped)
    assert dropped_form or any("[tuned:" in str(k) for k in compiled.module.kernels), r.confirmation


def _task():
    m, x = small()
    target, tasks = extract_tasks(graph_of(m, x), BOARD)
    return target, next(t for t in tasks if t.tunable and not t.graph_level)


def test_a_silent_device_is_a_hang_and_a_gone_one_lost(tmp_path):
    require_cross(BOARD)
    target, task = _task()
    with socket.socket() as silent:         # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        address = "tcp://127.0.0.1:%d" % silent.getsockname()[1]
        rs = run_batch(dict(task=task, target=str(target), target_key=target_key(target), configs=[{}, {}],
                            params=asdict(MeasureParams(timeout_s=2)), device=address))     # (the child's part)
        assert [r["error"] for r in rs] == ["hang", "hang"] and "no answer in 2 s" in rs[0]["detail"], rs
        rs = measure(task, str(target), target_key(target), [{}], MeasureParams(timeout_s=2), device=address)
        assert rs[0].error == "hang"
    rs = measure(task, str(target), target_key(target), [{}], FAST, device=address)      # the port is closed now
    assert rs[0].error == "lost" and "cannot reach the fxc device server" in rs[0].detail
    m, x = small()
    with pytest.raises(FxcError, match="may have disappeared.*run fxc.tune again to resume"):
        fxc.tune(m, x, target=BOARD, trials=2, log=tmp_path / "l.jsonl", params=FAST, device=address,
                 progress=False)
    assert [json.loads(line)["error"] for line in (tmp_path / "l.jsonl").read_text().splitlines()][:1] == ["lost"]


def test_a_device_needs_the_boards_target(tmp_path):
    m, x = small()
    with pytest.raises(FxcError, match="name the device's machine, e.g. target='rasp4b64'"):
        fxc.tune(m, x, target="llvm", trials=1, log=tmp_path / "l.jsonl", device="tcp://127.0.0.1:9")
    with pytest.raises(FxcError, match="runs llvm \\(CPU\\) artifacts"):
        fxc.tune(m, x, target="opencl", trials=1, log=tmp_path / "l.jsonl", device="tcp://127.0.0.1:9")
    with pytest.raises(FxcError, match="not tcp://host:port"):
        fxc.tune(m, x, target=BOARD, trials=1, log=tmp_path / "l.jsonl", device="tcp://127.0.0.1:x")
    np.testing.assert_equal(len(list(tmp_path.iterdir())), 0)      # nothing measured, no log written
