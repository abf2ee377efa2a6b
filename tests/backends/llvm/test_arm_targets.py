"""ARM targets as TVM users write them (`llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72`, `rasp3b`): parsing and
the Caps every layer reads (NEON's lanes and registers, FMA, dotprod/fp16/i8mm, the board's cores), the cross
toolchain chosen by the triple (its missing compiler a TargetError naming the Debian package), ARM code refused on
this x86 host with qemu named, and no x86 feature name left in a path ARM code goes through."""
import ast
import os
import re
from pathlib import Path

import pytest

from fxc.backends import check_runnable
from fxc.backends.llvm import compile as llvm
from fxc.backends.llvm.toolchain import toolchain
from fxc.errors import TargetError
from fxc.target import BOARDS, Target, host_triple, triple_arch

ROOT = Path(__file__).resolve().parents[3]
X86_HOST = triple_arch(host_triple()) == "x86_64"


# ---------------------------------------------------------------- parsing and capabilities
@pytest.mark.parametrize("spec,arch,cpu,registers,has,lacks", [
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53", "aarch64", "cortex-a53", 32, {"neon"}, {"dotprod"}),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72", "aarch64", "cortex-a72", 32, {"neon"}, {"fullfp16"}),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "aarch64", "cortex-a76", 32, {"dotprod", "fullfp16"},
     {"i8mm"}),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", "aarch64", "neoverse-n1", 32, {"dotprod", "fullfp16"},
     {"i8mm"}),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1 -mattr=+i8mm", "aarch64", "neoverse-n1", 32, {"i8mm"}, set()),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+fp16,+dotprod", "aarch64", "cortex-a72", 32,
     {"fullfp16", "dotprod"}, set()),
    ("llvm -mtriple=armv7l-linux-gnueabihf -mcpu=cortex-a53 -mattr=+neon", "arm", "cortex-a53", 16, {"neon", "vfp4"},
     {"dotprod"}),
])
def test_arm_target_capabilities(spec, arch, cpu, registers, has, lacks):
    """NEON's 128 bits (4 float32 lanes), 32 vector registers on aarch64 and 16 quad registers on armv7, FMA, the
    features the CPU has (dotprod/fp16 on ARMv8.2 cores, +i8mm asked for), 4 cores (a Raspberry Pi's) as threads."""
    t = Target.parse(spec)
    assert triple_arch(t.triple) == arch and t.mcpu == cpu
    assert (t.caps.lanes, t.caps.vector_registers, t.caps.threads) == (4, registers, 4)
    assert t.caps.fma and not t.caps.bf16_dot and not t.caps.scalef
    assert has <= t.caps.features and not lacks & t.caps.features
    assert not any(f.startswith(("avx", "sse")) for f in t.caps.features)
    assert Target.parse(str(t)) == t and Target.parse(str(t)).caps == t.caps       # round-trips


@pytest.mark.parametrize("board,triple,cpu", [
    ("rasp3b", "armv7l-unknown-linux-gnueabihf", "cortex-a53"),
    ("rasp3b64", "aarch64-unknown-linux-gnu", "cortex-a53"),
    ("rasp4b", "armv7l-unknown-linux-gnueabihf", "cortex-a72"),
    ("rasp4b64", "aarch64-unknown-linux-gnu", "cortex-a72"),
])
def test_board_aliases(board, triple, cpu):
    """A board's name is its llvm target (TVM's arm_cpu models); options after it apply on top."""
    t = Target.parse(board)
    assert (t.kind, t.triple, t.mcpu, t.caps.lanes, t.caps.threads) == ("llvm", triple, cpu, 4, 4)
    assert t == Target.parse(BOARDS[board])
    assert Target.parse(f"{board} -num-threads=2").caps.threads == 2
    assert "dotprod" in Target.parse(f"{board} -mattr=+dotprod").caps.features


def test_armv7_without_neon_is_scalar():
    """Debian armhf's baseline (no -mcpu): no NEON, so one float32 lane; -mattr=-neon takes it off a NEON CPU too."""
    assert Target.parse("llvm -mtriple=armv7l-linux-gnueabihf").caps.lanes == 1
    t = Target.parse("rasp3b -mattr=-neon")
    assert t.caps.lanes == 1 and t.caps.fma


@pytest.mark.parametrize("spec,words", [
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=haswell", ["aarch64 CPU 'haswell'", "cortex-a72", "rasp4b64"]),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -mattr=+avx2", ["'+avx2' is not an aarch64 feature",
                                                                       "dotprod"]),
    ("llvm -mtriple=armv7l-linux-gnueabihf -mattr=neon", ["+name or -name"]),
    ("rasp5", ["unknown target 'rasp5'", "rasp4b64"]),
])
def test_bad_arm_targets_are_named(spec, words):
    with pytest.raises(TargetError) as e:
        Target.parse(spec)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_x86_caps_flags_are_the_features_they_replace():
    """fma, bf16_dot and scalef are what the renderer read from x86 feature names before (the x86 code unchanged)."""
    hsw, spr = Target.parse("llvm -mcpu=haswell").caps, Target.parse("llvm -mcpu=sapphirerapids").caps
    assert (hsw.fma, hsw.bf16_dot, hsw.scalef) == (True, False, False)
    assert (spr.fma, spr.bf16_dot, spr.scalef) == (True, True, True)
    assert not Target.parse("llvm -mcpu=x86-64-v2").caps.fma


# ---------------------------------------------------------------- toolchain and the host's refusal
@pytest.mark.parametrize("board,cc", [("rasp3b64", "aarch64-linux-gnu-gcc"), ("rasp3b", "arm-linux-gnueabihf-gcc")])
def test_the_cross_toolchain_is_chosen_by_the_triple(board, cc):
    if not X86_HOST:
        pytest.skip("the cross toolchains are an x86 host's")
    chain = toolchain(Target.parse(board).triple)
    assert chain.cc == cc and chain.emulator()[:2] == [chain.qemu, "-L"]


def test_a_missing_cross_compiler_names_the_debian_package(monkeypatch, tmp_path):
    if not X86_HOST:
        pytest.skip("the cross toolchains are an x86 host's")
    monkeypatch.setenv("PATH", str(tmp_path))       # no compiler on it
    for board, package in (("rasp4b64", "gcc-aarch64-linux-gnu"), ("rasp4b", "gcc-arm-linux-gnueabihf")):
        with pytest.raises(TargetError, match=f"apt-get install {package}"):
            toolchain(Target.parse(board).triple)
        with pytest.raises(TargetError, match=f"apt-get install {package}"):
            llvm._runtime_object(tmp_path / "rt", Target.parse(board).triple)


def test_a_triple_without_a_toolchain_is_named():
    with pytest.raises(TargetError, match="cross-compiles for aarch64, arm"):
        toolchain("riscv64-unknown-linux-gnu")


@pytest.mark.parametrize("board", ["rasp3b64", "rasp4b"])
def test_arm_code_is_refused_on_this_host_with_qemu_named(board):
    if not X86_HOST:
        pytest.skip("an x86 host's refusal")
    with pytest.raises(TargetError, match="qemu-user"):
        check_runnable(Target.parse(board))


# ---------------------------------------------------------------- no x86 assumption in a shared path
# x86 feature names as LLVM spells them ("fma" is left out: it is also an intrinsic's and a math op's name)
X86_NAME = re.compile(r"(avx\w*|sse[\d.]*|ssse3|f16c|amx-\w+|fma4|xop|vnni)")
# files that are x86's own: the x86 CPU table (data), the x86-only measurement (vdpbf16ps), the table of cpuinfo flags
# per architecture; every other file reads Caps (fma, bf16_dot, scalef, lanes, registers) instead
X86_FILES = {"fxc/target.py", "fxc/backends/llvm/probe.py", "fxc/backends/llvm/deploy.py"}


def _feature_names_in_code(path: Path) -> list:
    """String constants in `path` that are x86 feature names ("avx512bf16", "sse4.2"; not prose such as docstrings or
    error messages, which may name an instruction set), with their line numbers."""
    return [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and X86_NAME.fullmatch(node.value)]


def test_no_x86_feature_name_outside_the_x86_files():
    found = [hit for path in sorted((ROOT / "fxc").rglob("*.py"))
             if str(path.relative_to(ROOT)) not in X86_FILES for hit in _feature_names_in_code(path)]
    assert not found, "x86 feature names in a shared path (read a Caps flag instead):\n" + "\n".join(found)


def test_the_x86_name_check_finds_one(tmp_path):
    """The check above can fail: a renderer testing a feature by its x86 name is found."""
    bad = ROOT / "fxc" / "_x86_name_probe.py"
    try:
        bad.write_text('def pick(m):\n    return "dpbf16ps" if m.has("avx512bf16") else "fma"\n')
        assert len(_feature_names_in_code(bad)) == 1
    finally:
        os.unlink(bad)
