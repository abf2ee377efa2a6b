"""The int8 kernels (ops/int8.py) in every form of the 4-way byte dot (Caps.int8_dot: vnni512 at 512 and 256 bits,
vnni256, the exact vpmaddwd form of AVX2 / AVX-512BW, the widening form of SSE and NEON, aarch64 sdot and armv7 under
qemu) against numpy integer references computed from the bytes themselves, not from the words: saturation edges
(activations 255 / 0, weights -128 / 127, zero points at the range ends, scales 2^-20 and 2^4, reductions whose u8 x s8
pair sums overflow int16, as vpmaddubsw's would)."""
import subprocess

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.int8 import i8_words_ref, pack_weight_ref, packed_inputs
from fxc.relay_like.builder import Builder
from fxc.runtime.artifact.read import read_artifact
from fxc.target import Target
from tests.backends.llvm.arm import export_for, require_cross, run_emulated
from tests.targets import require_runtime

# target -> (the int8_dot form, the instruction its IR names at the target's lanes)
X86 = {"llvm": ("vnni512", "vpdpbusd.512"), "llvm -mcpu=cascadelake": ("vnni512", "vpdpbusd.512"),
       "llvm -mcpu=haswell": ("pmaddwd", "avx2.pmadd.wd"),
       "llvm -mcpu=skylake-avx512": ("pmaddwd", "pmaddw.d.512"), "llvm -mcpu=x86-64": ("", "mul nsw <16 x i16>")}


def _conv_ref(x, w, x_zp, stride=(1, 1)):
    """sum((x - x_zp) * w) over each window, in int64 from the integer tensors."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    xs = x.astype(np.int64) - x_zp
    out = np.zeros((n, o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xs[:, :, i:i + stride[0] * oh:stride[0], j:j + stride[1] * ow:stride[1]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.int64))
    return out


def _requant_ref(acc, x_scale, w_scale, bias, y_scale, y_zp, qmin, qmax, relu, out_dtype):
    """The float32 epilogue written out: acc * (x_scale * w_scale) + bias, relu, round half even, zero point, clamp."""
    v = acc.astype(np.float32) * (np.float32(x_scale) * w_scale.reshape(1, -1, 1, 1))
    if bias is not None:
        v = v + bias.reshape(1, -1, 1, 1)
    if relu:
        v = np.maximum(v, np.float32(0))
    if out_dtype == "float32":
        return v
    q = np.rint(v / np.float32(y_scale)) + np.float32(y_zp)
    return np.clip(q, qmin, qmax).astype(out_dtype)


def _conv_case(x, w, x_zp, caps, out_dtype="int32", lanes=None, stride=(1, 1), x_scale=0.02, w_scale=None,
               bias=None, y_scale=0.1, y_zp=0, relu=False, nv=1):
    """(graph inputs, attrs, expected) of conv2d_packed_i8 for the form of `caps`: activation bytes unsigned on x86
    (s8 activations shifted by -128), signed on ARM (u8 shifted by 128)."""
    lanes = lanes or caps.lanes
    signed_a = caps.int8_dot in ("neon_dot", "neon")
    shift = (128 if x.dtype == np.uint8 else 0) if signed_a else (0 if x.dtype == np.uint8 else -128)
    o = w.shape[0]
    blocks = -(-o // (lanes * nv)) * nv
    w_scale = np.full(o, 2.0 ** -7, np.float32) if w_scale is None else np.asarray(w_scale, np.float32)
    qmin, qmax = {"uint8": (0, 255), "int8": (-128, 127)}.get(out_dtype, (0, 0))
    b = np.zeros(o, np.int32) if bias is None else np.asarray(bias, np.float32)
    arrays = packed_inputs(i8_words_ref(x, 1, shift), pack_weight_ref(w, 0, blocks, lanes), w, x_zp, b, x_scale,
                           w_scale, y_scale, y_zp)
    attrs = dict(out_channels=o, stride=stride, nv=nv, shift=shift, signed_a=signed_a, out_dtype=out_dtype,
                 relu=relu, qmin=qmin, qmax=qmax)
    acc = _conv_ref(x, w, x_zp, stride)
    want = acc.astype(np.int32) if out_dtype == "int32" else \
        _requant_ref(acc, x_scale, w_scale, bias, y_scale, y_zp, qmin, qmax, relu, out_dtype)
    return arrays, attrs, want


def _graph(cases):
    b = Builder()
    for arrays, attrs, _ in cases:
        ins = [b.graph.input(a.shape, str(a.dtype)) for a in arrays]
        b.graph.outputs += list(b.graph.call("conv2d_packed_i8", ins, **attrs))
    return b.graph


def _edge_cases(caps, lanes=None):
    """Saturation edges and a long reduction: every product at its extreme, sums past int16 in every pair."""
    rng = np.random.default_rng(0)
    full = lambda v, shape, dt: np.full(shape, v, dt)
    cases = []
    for xv, wv in ((255, -128), (255, 127), (0, -128), (0, 127)):       # u8 x s8 extremes, 64 x 3 x 3 reduction
        cases.append(_conv_case(full(xv, (1, 64, 5, 6), np.uint8), full(wv, (20, 64, 3, 3), np.int8), 0, caps,
                                lanes=lanes))
    x = rng.integers(0, 256, (1, 256, 6, 5)).astype(np.uint8)               # 2304-long reduction, random extremes
    w = rng.choice(np.array([-128, 127, -127, 1], np.int8), (33, 256, 3, 3))
    cases.append(_conv_case(x, w, 255, caps, lanes=lanes, nv=2))
    xs = rng.choice(np.array([-128, 127], np.int8), (1, 40, 4, 9))           # s8 activations, zero points at the ends
    ws = rng.choice(np.array([-128, 127], np.int8), (16, 40, 1, 3))
    cases.append(_conv_case(xs, ws, -128, caps, lanes=lanes))
    cases.append(_conv_case(xs, ws, 127, caps, lanes=lanes, stride=(1, 2)))
    xq = rng.integers(0, 256, (2, 24, 7, 8)).astype(np.uint8)
    wq = rng.integers(-128, 128, (40, 24, 3, 3)).astype(np.int8)
    bias = rng.uniform(-50, 50, 40).astype(np.float32)
    for x_scale, y_scale, y_zp, out in ((2.0 ** -20, 2.0 ** -20, 0, "uint8"), (2.0 ** 4, 2.0 ** 4, 255, "uint8"),
                                        (2.0 ** -20, 2.0 ** -16, -128, "int8"), (0.01, 0.5, 127, "int8")):
        cases.append(_conv_case(xq, wq, 128, caps, out, lanes=lanes, x_scale=x_scale, y_scale=y_scale, y_zp=y_zp,
                                w_scale=rng.uniform(2 ** -9, 2 ** -5, 40), nv=2))
    cases.append(_conv_case(xq, wq, 3, caps, "uint8", lanes=lanes, bias=bias, relu=True, y_zp=0, nv=2))
    x1 = rng.choice(np.array([0, 255, 1, 254], np.uint8), (1, 12, 13, 11))   # 1x1 stride 1: the GEMM over positions
    w1 = rng.choice(np.array([-128, 127, 5], np.int8), (40, 12, 1, 1))       # (143 of them: vectors and a tail)
    cases.append(_conv_case(x1, w1, 255, caps, "uint8", lanes=lanes, y_scale=2.0 ** -3, y_zp=128))
    cases.append(_conv_case(xq, wq, 3, caps, "float32", lanes=lanes, bias=bias, nv=2))
    return cases


def _check(got, cases):
    for g, (_, attrs, want) in zip(got, cases):
        np.testing.assert_array_equal(g, want)     # float32 outputs too: the epilogue rounds as written


@pytest.mark.parametrize("target", list(X86))
def test_forms_on_x86(target):
    """Each x86 form's kernels run here (the host has AVX-512 VNNI: every lower form runs too) and match the integer
    reference exactly; the IR uses the form's instruction."""
    require_runtime(target)
    t = Target.parse(target)
    form, instruction = X86[target]
    assert t.caps.int8_dot == form
    cases = _edge_cases(t.caps)
    module = build(_graph(cases), target=t)
    assert instruction in module.source
    _check(module(*[a for arrays, _, _ in cases for a in arrays]), cases)


def test_vnni_at_256_bits():
    """Weights packed in 8 lanes on an AVX-512 VNNI host: vpdpbusd on ymm registers (the IR of the vnni256 form)."""
    t = Target.parse("llvm")
    if t.caps.int8_dot != "vnni512":
        pytest.skip("this host has no AVX-512 VNNI")
    cases = _edge_cases(t.caps, lanes=8)
    module = build(_graph(cases), target=t)
    assert "vpdpbusd.256" in module.source
    _check(module(*[a for arrays, _, _ in cases for a in arrays]), cases)


def test_avxvnni_compiles_to_vex_vpdpbusd():
    """AVX-VNNI (Alder Lake: no AVX-512) gets the 256-bit VEX vpdpbusd; built here, run where the CPU has it."""
    t = Target.parse("llvm -mcpu=alderlake")
    assert t.caps.int8_dot == "vnni256" and t.caps.lanes == 8
    cases = _edge_cases(t.caps)[:2]
    module = build(_graph(cases), target=t)
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(module.library)], capture_output=True,
                         text=True, check=True).stdout
    assert "{vex} vpdpbusd" in asm


def test_forms_of_targets():
    assert Target.parse("llvm -mcpu=cascadelake").caps.int8_dot == "vnni512"
    assert Target.parse("llvm -mcpu=znver3").caps.int8_dot == "pmaddwd"
    assert Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76").caps.int8_dot == "neon_dot"
    assert Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53").caps.int8_dot == "neon"
    assert Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a53 -mattr=+dotprod").caps.int8_dot \
        == "neon_dot"
    assert Target.parse("rasp3b").caps.int8_dot == "neon"
    assert Target.parse("llvm -mtriple=armv7l-linux-gnueabihf").caps.int8_dot == ""


@pytest.mark.parametrize("arm,instruction", [("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "sdot"),
                                             ("rasp3b", "mul nsw <16 x i16>")])
def test_forms_on_arm_under_qemu(arm, instruction, tmp_path):
    """aarch64 sdot (u8 activations shifted to s8, the shift compensated by the weight sums) and armv7 NEON's
    widening form, exported and run under qemu."""
    require_cross(arm)
    caps = Target.parse(arm).caps
    cases = _edge_cases(caps)
    module = build(_graph(cases), target=arm)
    assert instruction in module.source
    arrays = [a for arrays, _, _ in cases for a in arrays]
    artifact, folder, exe = export_for(module, arm, tmp_path)
    manifest, _ = read_artifact(artifact)
    _check(run_emulated(folder, exe, arm, arrays, manifest["outputs"], tmp_path), cases)


def test_byte_dot_legalizes_to_int32_arithmetic():
    """legalize.scalarize (device renderers: OpenCL C, GLSL, WGSL) takes a vector DotI8 apart into each lane's
    shifts, masks, multiplies and adds, and those are the byte dot: checked on words of extreme bytes by evaluating
    the scalar expressions."""
    from fxc.lowering.legalize import scalarize
    from fxc.lowering.loop_ir import Buffer, Store
    from fxc.symbolic.expr import Bin, Const, DotI8, Load, VecLoad, walk

    o, a, b = Buffer("o", "int32", 4), Buffer("a", "int32", 4), Buffer("b", "int32", 4)
    for signed in (False, True):
        zero = Const(0, "int64")
        s = scalarize(Store(o, zero, DotI8(VecLoad(o, zero, 4), VecLoad(a, zero, 4), VecLoad(b, zero, 4), signed)))
        stores = s.stmts
        assert len(stores) == 4 and not any(isinstance(x, DotI8) for st in stores for x in walk(st.value))
        rng = np.random.default_rng(3)
        words = {buf.name: rng.choice(np.array([0, 1, 127, 128, 255], np.uint8), (4, 4)) for buf in (o, a, b)}
        vals = {name: w.view("<i4")[:, 0].astype(np.int64) for name, w in words.items()}
        ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "shl": np.left_shift,
               "shr": np.right_shift}

        def ev(e):
            if isinstance(e, Const):
                return np.int64(e.value)
            if isinstance(e, Load):
                return vals[e.args[0].name][int(ev(e.args[1]))]
            assert isinstance(e, Bin), e
            r = ops[e.args[0]](ev(e.args[1]), ev(e.args[2]))
            return np.int64(((int(r) + 2 ** 31) % 2 ** 32) - 2 ** 31) if e.dtype == "int32" else r
        for k, st in enumerate(stores):
            bytes_a = words["a"][k].astype(np.int8 if signed else np.uint8).astype(np.int64)
            want = vals["o"][k] + (bytes_a * words["b"][k].astype(np.int8).astype(np.int64)).sum()
            assert ev(st.value) == want


def test_words_of_few_channels_vectorize():
    """pack_i8_words over 3 channels (a length not a multiple of 4: the fourth byte zero) runs as vector rows of
    16-byte loads on llvm, and equals the numpy words."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 3, 5, 48)).astype(np.uint8)
    x.flat[::3] = 255
    g = Builder().graph
    g.outputs = [g.call1("pack_i8_words", [g.input(x.shape, "uint8")], axis=1, shift=0)]
    module = build(g, target="llvm")
    assert "load <16 x i8>" in module.source
    np.testing.assert_array_equal(np.asarray(module(x)), i8_words_ref(x, 1))
