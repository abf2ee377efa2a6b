"""CPU targets as TVM users write them ("llvm -mcpu=haswell"): parsing and capabilities, code built for the target's
CPU (not the host's), lower ISAs running on this host, cross-compiling and exporting for a CPU the host is not (its
run refused with a TargetError), and portable bf16 (no library call LLVM emits where the CPU lacks the instruction)."""
import json
import subprocess
import zipfile

import numpy as np
import pytest
import torch

import fxc
from fxc.backends import check_runnable
from fxc.backends.llvm import compile as llvm
from fxc.driver.build import build
from fxc.driver.options import check_precision
from fxc.errors import CompileError, TargetError
from fxc.relay_like.builder import Builder
from fxc.target import Target, host_features
from tests.helpers import ConvNet, assert_close_np
from tests.ops import test_ops

LOWER_ISAS = ["llvm -mcpu=haswell", "llvm -mcpu=x86-64-v2"]
NO_BF16 = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=cascadelake"]     # AVX-512 without vcvtne2ps2bf16/vdpbf16ps
CROSS = "llvm -mcpu=sapphirerapids"      # AMX and AVX-512 FP16: no host of this machine kind has both


def _skip_unless_runnable(spec):
    missing = Target.parse(spec).caps.features - host_features()
    if missing:
        pytest.skip(f"this host's CPU lacks {', '.join(sorted(missing))}, which target '{spec}' uses")


def _matmul_gelu_graph(m=5, k=37, n=40):
    b = Builder()
    x, w = b.graph.input((m, k), "float32"), b.graph.input((k, n), "float32")
    (y,) = b.graph.call("matmul", [x, w])
    b.graph.outputs = list(b.graph.call("gelu", [y]))
    return b.graph


def _reference(x, w):
    y = (x.astype(np.float64) @ w.astype(np.float64))
    return torch.nn.functional.gelu(torch.from_numpy(y)).numpy()


def _disassembly(path):
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                          check=True).stdout


# ---------------------------------------------------------------- parsing and capabilities
@pytest.mark.parametrize("spec,lanes,registers,has,lacks", [
    ("llvm -mcpu=haswell", 8, 16, "avx2", "avx512f"),
    ("llvm -mcpu=x86-64-v2", 4, 16, "sse4.2", "avx"),
    ("llvm -mcpu=skylake-avx512", 16, 32, "avx512f", "avx512bf16"),
    ("llvm -mcpu=sapphirerapids", 16, 32, "avx512bf16", "avx512vp2intersect"),
    ("llvm -mcpu=haswell -mattr=-fma,+avx512f", 16, 32, "avx512f", "fma"),
])
def test_target_capabilities(spec, lanes, registers, has, lacks):
    t = Target.parse(spec)
    assert (t.caps.lanes, t.caps.vector_registers) == (lanes, registers)
    assert t.caps.has(has) and not t.caps.has(lacks)
    assert Target.parse(str(t)) == t


def test_bare_llvm_is_this_host():
    t = Target.parse("llvm")
    assert t == Target.parse(f"llvm -mcpu={t.mcpu}") == Target.parse("llvm -mcpu=native")
    assert t.caps.features == host_features()
    check_runnable(t)


@pytest.mark.parametrize("spec,match", [("llvm -mcpu=pentium9", "unknown CPU 'pentium9'"),
                                        ("llvm -mattr=avx2", "start with \\+ or -"),
                                        ("llvm -opt=3", "unknown option"), ("tpu", "unknown target 'tpu'")])
def test_bad_target_strings_are_target_errors(spec, match):
    with pytest.raises(TargetError, match=match):
        build(_matmul_gelu_graph(), target=spec)


# ---------------------------------------------------------------- code for the target's CPU
@pytest.mark.parametrize("spec,forbidden", [("llvm -mcpu=haswell", "zmm"), ("llvm -mcpu=x86-64-v2", "ymm")])
def test_code_uses_only_the_targets_vector_registers(spec, forbidden):
    """The target machine is built for -mcpu, not the host: no AVX-512 (zmm) in haswell code, no AVX (ymm) in
    x86-64-v2 code, while the host's build of the same graph does use its widest registers."""
    g = _matmul_gelu_graph(16, 64, 64)
    assert forbidden not in _disassembly(build(g, target=spec).library)
    if Target.parse("llvm").caps.has("avx512f"):
        assert "zmm" in _disassembly(build(_matmul_gelu_graph(16, 64, 64), target="llvm").library)


def _conv_matmul_graph():
    """A 3x3 stride-2 conv (pack_weights: conv2d_packed) + relu, and a matmul (matmul_packed) + gelu."""
    b = Builder()
    x, w = b.graph.input((1, 8, 12, 12), "float32"), b.graph.input((24, 8, 3, 3), "float32")
    a, m = b.graph.input((5, 37), "float32"), b.graph.input((37, 40), "float32")
    (y,) = b.graph.call("conv2d", [x, w], stride=(2, 2))
    (z,) = b.graph.call("matmul", [a, m])
    b.graph.outputs = [b.graph.call("relu", [y])[0], b.graph.call("gelu", [z])[0]]
    return b.graph


def _rendered_ir(graph, spec) -> tuple:
    """(the graph after the target's passes, the LLVM IR of its kernels) as the build makes them for `spec`."""
    from fxc.driver.groups import group_kernel
    from fxc.relay_like.context import PassContext
    from fxc.relay_like.passes.fuse_ops import fuse_ops
    from fxc.relay_like.passes.hoist import hoisted_values
    from fxc.relay_like.pipeline import run_passes
    target = Target.parse(spec)
    g = run_passes(graph, PassContext(target))
    groups = fuse_ops(g, hoisted=hoisted_values(g))
    kernels = [group_kernel(gr, f"k{i}", 1, target) for i, gr in enumerate(groups)]
    return g, llvm.render(kernels, [], target=target)


@pytest.mark.parametrize("spec,lanes", [("llvm -mcpu=skylake-avx512", 16), ("llvm -mcpu=haswell", 8),
                                        ("llvm -mcpu=x86-64-v2", 4)])
def test_schedules_take_the_targets_vector_width(spec, lanes):
    """The loop IR's vectors are the target's Caps.lanes wide (16 float32 lanes on AVX-512, 8 on AVX2, 4 on SSE4.2):
    the packed weights' blocks, the conv and GEMM register tiles and the epilogues' vectors in the rendered IR, with
    no wider vector anywhere (compiling needs no such CPU). Where this host can run the code, it matches numpy."""
    assert Target.parse(spec).caps.lanes == lanes
    g, ir = _rendered_ir(_conv_matmul_graph(), spec)
    packs = [n.attrs["lanes"] for n in g.nodes if n.op == "pack_lanes"]
    assert len(packs) == 2 and set(packs) == {lanes}
    assert {"conv2d_packed", "matmul_packed"} <= {n.op for n in g.nodes}
    assert f"load <{lanes} x float>" in ir and f"<{lanes} x float>" in ir
    assert (f"fma.v{lanes}f32" in ir) == Target.parse(spec).caps.has("fma")     # the tiles' multiply-adds
    assert not any(f"<{wider} x float>" in ir for wider in (8, 16, 32, 64) if wider > lanes)
    if Target.parse(spec).caps.features - host_features():
        return
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 8, 12, 12)).astype(np.float32), rng.standard_normal((24, 8, 3, 3)).astype(np.float32)
    a, m = rng.standard_normal((5, 37)).astype(np.float32), rng.standard_normal((37, 40)).astype(np.float32)
    y, z = build(_conv_matmul_graph(), target=spec)(x, w, a, m)
    conv = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=2)
    assert_close_np(y, torch.relu(conv).numpy().astype(np.float32))
    assert_close_np(z, _reference(a, m).astype(np.float32))


def test_multiply_adds_without_an_fma_unit_call_no_libm():
    """x86-64-v2 has no FMA: a GEMM's multiply-adds are a multiply and an add there, not a call of libm's fmaf per
    lane (which made ResNet-18 50x slower than on haswell)."""
    lib = build(_matmul_gelu_graph(16, 64, 64), target="llvm -mcpu=x86-64-v2").library
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True,
                               check=True).stdout
    assert "fmaf" not in undefined


def test_compile_worker_builds_for_the_requested_target(tmp_path):
    """A compile worker process takes the target machine with each part: haswell code from it has no zmm even
    though the worker runs on this (AVX-512) host."""
    worker = llvm._workers(1)[0]
    if not worker.ready():
        pytest.skip("no compile worker process could start here")
    ir = (llvm.module_writer("llvm -mcpu=haswell").text([], []) + "\ndefine void @k0_twice(ptr %p) {\n"
          "  %v = load <16 x float>, ptr %p\n  %w = fadd <16 x float> %v, %v\n  store <16 x float> %w, ptr %p\n"
          "  ret void\n}\n")
    for spec, wide in [("llvm -mcpu=haswell", "ymm"), ("llvm", "zmm" if Target.parse("llvm").caps.has("avx512f")
                                                         else None)]:
        (tmp_path / "k.o").write_bytes(worker.compile(ir, True, llvm.machine_spec(spec)))
        code = _disassembly(tmp_path / "k.o")
        assert worker.ok and (wide is None or wide in code)
        if spec != "llvm":
            assert "zmm" not in code


def test_module_cache_key_is_the_targets():
    """Two targets, one graph: two libraries (the cache key holds the target's CPU and features)."""
    specs = ["llvm"] + LOWER_ISAS
    libs = {build(_matmul_gelu_graph(), target=spec).library for spec in specs}
    machines = {(t.mcpu, t.caps.features) for t in map(Target.parse, specs)}   # a haswell host's "llvm" is haswell
    assert len(libs) == len(machines) >= 2


@pytest.mark.parametrize("spec", LOWER_ISAS)
def test_lower_isa_runs_on_this_host(spec):
    _skip_unless_runnable(spec)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 37)).astype(np.float32), rng.standard_normal((37, 40)).astype(np.float32)
    assert_close_np(build(_matmul_gelu_graph(), target=spec)(x, w), _reference(x, w).astype(np.float32))


# ---------------------------------------------------------------- bf16 on a CPU without AVX-512 BF16
BF16_CASES = [("conv2d_winograd", 4), ("conv2d_winograd", 5), ("pack_bf16_pairs", 0)]


@pytest.mark.parametrize("spec", NO_BF16)
@pytest.mark.parametrize("name,k", BF16_CASES, ids=[f"{n}-{k}" for n, k in BF16_CASES])
def test_bf16_ops_on_a_cpu_without_avx512bf16(name, k, spec):
    """issue 27, item 1: on a Cascade Lake host these three registry cases failed to load (`undefined symbol:
    __truncsfbf2`): the vector pack to bfloat16 is now integer rounding there, and matches the reference."""
    _skip_unless_runnable(spec)
    test_ops.test_op_matches_reference(name, k, spec)


def test_bf16_pack_rounds_to_nearest_even_and_keeps_nan():
    """The integer rounding (no avx512bf16) and vcvtne2ps2bf16 (the host's, where it has it) give the same words:
    ties to even, NaN -> 0x7FC0, infinities and the largest finite values as c10::BFloat16 rounds them."""
    vals = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -1 - 2 ** -8, np.nan, -np.nan, np.inf, -np.inf, 3.4e38, -0.0,
                     1e-40, 2 ** -126, 65504.0, 1.00390625, 0.1, -7.3] * 2, np.float32)
    b = Builder()
    x = b.graph.input((2, vals.size), "float32")
    b.graph.outputs = list(b.graph.call("pack_bf16_pairs", [x], axis=0))
    expected = torch.from_numpy(np.stack([vals, vals[::-1].copy()])).to(torch.bfloat16).view(torch.int16).numpy()
    expected = expected.astype(np.uint16).astype(np.uint32)
    expected = (expected[0] | (expected[1] << 16)).view(np.int32)
    expected = np.where(np.isnan(np.stack([vals, vals[::-1]])).any(0), 0, expected)
    # the integer rounding on the widest target without avx512bf16 that this host runs; the instruction where it has it
    rounding = next(s for s in ["llvm -mcpu=cascadelake", "llvm -mcpu=haswell", "llvm -mcpu=x86-64-v2"]
                    if Target.parse(s).caps.features <= host_features())
    specs = [rounding] + (["llvm"] if Target.parse("llvm").caps.has("avx512bf16") else [])
    for spec in specs:
        got = build(b.graph, target=spec)(np.stack([vals, vals[::-1].copy()]))
        nan = np.isnan(np.stack([vals, vals[::-1]]))
        words = got.reshape(-1).view(np.uint32)
        for half, isnan in ((words & 0xFFFF, nan[0]), (words >> 16, nan[1])):
            assert ((half == 0x7FC0) | (half == 0xFFC0))[isnan].all(), spec
        ok = ~nan.any(0)
        np.testing.assert_array_equal(got.reshape(-1)[ok], expected[ok], err_msg=spec)


def test_an_undefined_symbol_is_a_compile_error_naming_it():
    """A library needing a symbol the runtime's libraries lack fails at link time with a CompileError naming the
    symbol, never an OSError at load: LLVM's own fptrunc to bfloat on a CPU without avx512bf16 needs
    __truncsfbf2, which Debian's libgcc 12 lacks."""
    mw = llvm.module_writer("llvm -mcpu=cascadelake")
    ir = (mw.text([], []) + "\ndefine void @k0_cvt(ptr %p) {\n  %v = load <16 x float>, ptr %p\n"
          "  %h = fptrunc <16 x float> %v to <16 x bfloat>\n  store <16 x bfloat> %h, ptr %p\n  ret void\n}\n")
    try:
        llvm.build_library(ir, target="llvm -mcpu=cascadelake")
    except CompileError as e:
        assert "__truncsfbf2" in str(e)
    else:       # a newer libgcc defines it: then the library links, and loads
        import ctypes
        ctypes.CDLL(str(llvm.build_library(ir, target="llvm -mcpu=cascadelake")[0]))


@pytest.mark.parametrize("spec", NO_BF16)
def test_bf16_precision_without_avx512bf16_is_a_target_error(spec):
    with pytest.raises(TargetError, match="AVX-512 BF16"):
        check_precision("bf16", spec)
    with pytest.raises(TargetError, match="AVX-512 BF16"):
        fxc.from_torch(torch.nn.Linear(4, 4), torch.randn(2, 4), target=spec, precision="bf16")


# ---------------------------------------------------------------- cross-compilation
def test_cross_compile_and_export_for_a_cpu_this_host_is_not(tmp_path):
    target = Target.parse(CROSS)
    if not target.caps.features - host_features():
        pytest.skip("this host can run sapphirerapids code: nothing to cross-compile")
    model, x = ConvNet(8, 5).eval(), torch.randn(1, 3, 8, 8)
    compiled = fxc.from_torch(model, (x,), target=CROSS)
    with pytest.raises(TargetError, match="lacks"):         # before any kernel runs
        compiled(x)
    path = tmp_path / "spr.fxc"
    fxc.export(compiled, path)
    with zipfile.ZipFile(path) as z:
        info = json.loads(z.read("manifest.json"))["target_info"]
    assert info["cpu"] == "sapphirerapids" and {"avx512_bf16", "amx_tile", "avx512_fp16"} <= set(info["cpu_flags"])
    with pytest.raises(TargetError):
        fxc.load(path)
    with pytest.raises(TargetError, match="lacks"):    # torch.compile runs what it compiles: refused, as fxc's error
        torch.compile(model, backend="fxc", options={"target": CROSS})(x)


@pytest.mark.parametrize("spec", LOWER_ISAS)
def test_torch_compile_and_from_torch_take_target_strings(spec, tmp_path):
    _skip_unless_runnable(spec)
    model, x = ConvNet(8, 5).eval(), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(torch.compile(model, backend="fxc", options={"target": spec})(x), expected,
                                   rtol=1e-4, atol=1e-5)
        compiled = fxc.from_torch(model, (x,), target=spec)
        torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-5)
    fxc.export(compiled, tmp_path / "m.fxc")
    with zipfile.ZipFile(tmp_path / "m.fxc") as z:
        info = json.loads(z.read("manifest.json"))["target_info"]
    assert info["cpu"] == Target.parse(spec).mcpu and "avx512f" not in info["cpu_flags"]
    np.testing.assert_allclose(fxc.load(tmp_path / "m.fxc")(x.numpy()), expected.numpy(), rtol=1e-4, atol=1e-5)
