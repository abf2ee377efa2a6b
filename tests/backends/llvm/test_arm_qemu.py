"""ARM builds run under emulation (qemu-user), as CI has no ARM machine: a fixed op sample and the reference models
(ResNet-18, MobileNetV2, BERT at reduced sizes), compiled here for aarch64 (rasp3b64) and 32-bit armv7 (rasp3b),
exported, run by examples/c/run_model.c built with the cross gcc under qemu-aarch64 / qemu-arm, against the numpy
references and PyTorch on this host; fxc.load of an ARM artifact refused here with qemu named; the device server
under qemu measuring and running an artifact sent over 127.0.0.1."""
import socket
import struct
import subprocess

import numpy as np
import pytest
import torch

import fxc
from fxc import cli
from fxc.driver.build import build
from fxc.errors import ExecutionError, LibraryError, TargetError
from fxc.relay_like.builder import Builder
from fxc.runtime import remote
from fxc.runtime.artifact import loader
from fxc.runtime.artifact.read import read_artifact
from fxc.runtime.cpu.library import check_elf, elf_arch
from fxc.runtime.remote import measure_remote, run_remote
from fxc.target import Target, host_triple, triple_arch
from fxc.testing.models import bert_encoder, mobilenet_v2, randomize_batchnorm, resnet18
from tests.backends.llvm.arm import ARM_TARGETS, export_for, require_cross, run_emulated
from tests.helpers import assert_close_np
from tests.ops import test_ops

pytestmark = pytest.mark.parametrize("arm", ARM_TARGETS)


def _op_sample_graph():
    """One graph holding every case of the lower-ISA op sample (tests/ops/test_ops.py: every fusion kind, every
    conv/matmul sample, the float16/bfloat16 casts and packs), each on its own inputs: (graph, inputs, references)."""
    b = Builder()
    arrays, refs = [], []
    for name, k in test_ops.LOWER_ISA_CASES:
        xs, attrs = test_ops.sample(name, k)
        ins = [b.graph.input(a.shape, str(a.dtype) if a.dtype != np.bool_ else "bool") for a in xs]
        outs = b.graph.call(name, ins, **attrs)
        b.graph.outputs += list(outs)
        arrays += xs
        ref = test_ops.all_ops()[name].reference(*xs, **attrs)
        refs += list(ref if isinstance(ref, tuple) else (ref,))
    return b.graph, arrays, refs


def test_op_sample_under_qemu(arm, tmp_path):
    require_cross(arm)
    graph, arrays, refs = _op_sample_graph()
    module = build(graph, target=arm)
    artifact, folder, exe = export_for(module, arm, tmp_path)
    manifest, _ = read_artifact(artifact)
    got = run_emulated(folder, exe, arm, arrays, manifest["outputs"], tmp_path)
    assert len(got) == len(refs)
    for g, r in zip(got, refs):
        assert_close_np(g, np.asarray(r).astype(g.dtype))


def test_float64_max_min_under_qemu(arm, tmp_path):
    """float64 maximum/minimum and their reductions (compare and select on armv7, whose LLVM cannot lower the
    intrinsics: Caps.float64_minmax) propagate nan and order -0 below +0, as numpy does."""
    require_cross(arm)
    x = np.array([1.5, np.nan, -0.0, 0.0, -np.inf, 3.0, 2.0, -1.0], np.float64)
    y = np.array([2.5, 1.0, 0.0, -0.0, 7.0, np.nan, 2.0, -3.0], np.float64)
    b = Builder()
    xi, yi = b.graph.input(x.shape, "float64"), b.graph.input(y.shape, "float64")
    outs = [o for op in ("maximum", "minimum") for o in b.graph.call(op, [xi, yi])]
    outs += [o for op in ("amax", "amin") for o in b.graph.call(op, [yi], axes=[0])]
    b.graph.outputs = outs
    artifact, folder, exe = export_for(build(b.graph, target=arm), arm, tmp_path)
    manifest, _ = read_artifact(artifact)
    got = run_emulated(folder, exe, arm, [x, y], manifest["outputs"], tmp_path)
    for g, r in zip(got, [_ieee(np.maximum, x, y), _ieee(np.minimum, x, y), np.max(y), np.min(y)]):
        np.testing.assert_array_equal(g, r)
        np.testing.assert_array_equal(np.signbit(g) & ~np.isnan(g), np.signbit(r) & ~np.isnan(r))


def _ieee(fn, x, y):
    """IEEE 754-2019 maximum / minimum (LLVM's llvm.maximum, fxc's semantics): numpy's, with -0 below +0."""
    negative = np.signbit(x) | np.signbit(y) if fn is np.minimum else np.signbit(x) & np.signbit(y)
    return np.where((x == 0) & (y == 0), np.where(negative, -0.0, 0.0), fn(x, y))


def _conv_net(factory, seed: int):
    """A reference conv net at reduced size: 64x64 images, 100 classes, its batch norms given statistics measured
    on such images (fxc.testing.models.randomize_batchnorm), and one input."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = factory(num_classes=100)
    randomize_batchnorm(model, seed, (torch.randn(2, 3, 64, 64, generator=g),))
    return model.eval(), (torch.randn(1, 3, 64, 64, generator=g),)


def _small_bert():
    """BERT's encoder at reduced size (2 layers of width 64, 16 tokens of which the last 4 are masked)."""
    torch.manual_seed(0)
    model = bert_encoder(vocab=1000, hidden=64, layers=2, heads=4, intermediate=128, max_len=16).eval()
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, 12:] = 0
    return model, (ids, mask)


MODELS = {"resnet18": lambda: _conv_net(resnet18, 1), "mobilenet_v2": lambda: _conv_net(mobilenet_v2, 2),
          "bert": _small_bert}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_reference_model_under_qemu(arm, name, tmp_path):
    """The model exported for the ARM target, run by the cross-built C program under qemu, gives PyTorch's
    outputs on this host (the usual model tolerance)."""
    require_cross(arm)
    model, inputs = MODELS[name]()
    with torch.no_grad():
        expected = model(*inputs)
    compiled = fxc.from_torch(model, inputs, target=arm)
    artifact, folder, exe = export_for(compiled, arm, tmp_path)
    manifest, _ = read_artifact(artifact)
    assert triple_arch(manifest["target_info"]["triple"]) == triple_arch(Target.parse(arm).triple)
    (got,) = run_emulated(folder, exe, arm, [t.numpy() for t in inputs], manifest["outputs"], tmp_path)
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-3, atol=1e-3)


def test_arm_artifact_is_refused_by_load_here(arm, tmp_path):
    """fxc.load on this x86 host refuses an ARM artifact, saying it needs an ARM machine or qemu; calling the
    compiled module here is refused the same way (it is built and exportable, never loaded)."""
    if triple_arch(host_triple()) == triple_arch(Target.parse(arm).triple):
        pytest.skip("this host runs the target's code")
    require_cross(arm)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    compiled = fxc.from_torch(model, (x,), target=arm)
    with pytest.raises(TargetError, match="qemu"):
        compiled(x)
    path = fxc.export(compiled, tmp_path / "m.fxc")
    with pytest.raises(TargetError, match=r"built for .*(aarch64|armv7l).*qemu-user.*qemu-(aarch64|arm)"):
        fxc.load(path)


def test_arm_artifact_passes_an_arm_machines_load_checks(arm, tmp_path, monkeypatch):
    """What fxc.load checks before it loads the library passes on a machine of the artifact's architecture with NEON
    (its cpuinfo flags): the target's arch, the CPU flags, the ELF (32-bit on armv7); a machine without NEON is told."""
    require_cross(arm)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    path = fxc.export(fxc.from_torch(model, (torch.randn(2, 8),), target=arm), tmp_path / "m.fxc")
    manifest, parts = read_artifact(path)
    arch = triple_arch(Target.parse(arm).triple)
    lib = tmp_path / "lib.so"
    lib.write_bytes(parts["libfxc_model.so"])
    check_elf(str(lib))
    assert elf_arch(str(lib)) == arch
    short = tmp_path / "short.so"      # (a truncated 32- or 64-bit library is refused before dlopen maps it)
    short.write_bytes(parts["libfxc_model.so"][:len(parts["libfxc_model.so"]) // 2])
    with pytest.raises(LibraryError, match="truncated"):
        check_elf(str(short))
    neon = {"aarch64": "asimd", "arm": "neon"}[arch]
    assert neon in manifest["target_info"]["cpu_flags"]
    monkeypatch.setattr(loader, "process_arch", lambda: arch)
    flags = set(manifest["target_info"]["cpu_flags"]) | {"fp", "evtstrm"}     # a Pi's (vfpv4 on armv7 too)
    monkeypatch.setattr(loader, "_cpu_flags", lambda: flags)
    loader.check_target(manifest)
    monkeypatch.setattr(loader, "_cpu_flags", lambda: flags - {neon})
    with pytest.raises(TargetError, match=f"CPU with {neon}"):
        loader.check_target(manifest)


def test_device_server_under_qemu(arm, tmp_path, monkeypatch):
    """The device server, cross-built and run under qemu on 127.0.0.1, runs an artifact sent to it: its outputs are
    PyTorch's, and measure_remote returns `repeat` positive costs; a bad request is an ExecutionError naming why."""
    chain = require_cross(arm)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 8 * 8, 10)).eval()
    x = torch.randn(1, 3, 8, 8)
    artifact = fxc.export(fxc.from_torch(model, (x,), target=arm), tmp_path / "m.fxc")
    exe = tmp_path / "server"
    assert cli.main(["serve-device", "--target", arm, "-o", str(exe)]) == 0      # cross-built for the board
    server = subprocess.Popen([*chain.emulator(), str(exe), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        address = "tcp://127.0.0.1:" + server.stdout.readline().rsplit(":", 1)[1].strip()
        (got,), costs = run_remote(artifact, address, [x.numpy()], number=2, repeat=2)
        torch.testing.assert_close(torch.from_numpy(got.copy()), model(x).detach(), rtol=1e-4, atol=1e-4)
        assert len(costs) == 2 and all(c > 0 for c in costs)
        costs = measure_remote(artifact, address, number=3, repeat=4)
        assert len(costs) == 4 and all(c > 0 for c in costs)
        # a client that skipped the signature check: an input of the wrong size is refused by the server
        monkeypatch.setattr(remote, "check_inputs", lambda specs, arrays: [np.zeros(3, np.float32)])
        with pytest.raises(ExecutionError, match="has 12 bytes; the model takes 768"):
            run_remote(artifact, address, [x.numpy()])
        monkeypatch.undo()
        assert len(measure_remote(artifact, address, number=1, repeat=1)) == 1      # the server still serves
        # a raw request (the protocol of device_server.c) whose library is not one: an answer naming it
        head = b"FXCQ" + struct.pack("<6I", 1, 1, 1, 0, 0, 0)
        with socket.create_connection(remote.parse_address(address), timeout=60) as s:
            s.sendall(head + struct.pack("<Q", 4) + b"junk" + struct.pack("<Q", 0))
            answer = s.makefile("rb").read()
        assert answer[:8] == b"FXCR" + struct.pack("<I", 1) and b"cannot load the library" in answer
    finally:
        server.terminate()
        server.wait(timeout=10)

