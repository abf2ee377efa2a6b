"""Storage dtypes (float16, bfloat16, int16) and complex values through torch.compile, compared with eager:
conversions must round exactly as PyTorch does, and graphs that take and return these dtypes compile."""
import numpy as np
import pytest
import torch

from fxc.capture.torch.explain import explain

NAN, INF = float("nan"), float("inf")


def compiled(fn, target="llvm"):
    return torch.compile(fn, backend="fxc", options={"target": target})


def bits(t):
    """float16/bfloat16 compared bit for bit (NaNs by class only: their payload is not specified)."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return torch.where(t.isnan(), torch.zeros((), dtype=torch.int16), t.view(torch.int16))
    return t


def edge_values(n=257):
    """Random floats over many binades plus the values where conversions go wrong: ties, overflow, NaN."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-30, 30, (n,), generator=g).float())
    special = [NAN, INF, -INF, 0.0, -0.0, 65504.0, 65519.99, 65520.0, -70000.0, 40000.7, -40000.2, 3e9, -3e9,
               1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 2 ** -24, 2 ** -25, 6e-8,
               1e-40, 3.4e38, 2.5, -2.5, 32767.4, -32768.6]
    return torch.cat([x, torch.tensor(special)])


@pytest.mark.cpu_targets
@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.int64, torch.int32])
@pytest.mark.parametrize("dst", [torch.float16, torch.bfloat16, torch.int16])
def test_conversion_to_storage_dtypes_matches_eager(src, dst, target):
    x = edge_values()
    if src.is_floating_point:
        x = x.to(src)
    else:
        x = x.clamp(-2e9, 2e9).nan_to_num(0.0).to(src)
    f = lambda x: x.to(dst)  # noqa: E731
    out = compiled(f, target)(x)
    assert out.dtype == dst
    torch.testing.assert_close(bits(out), bits(f(x)), rtol=0, atol=0)
    assert not explain(f, x).fallback_ops


@pytest.mark.cpu_targets
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int16])
def test_storage_dtype_inputs_and_round_trips(dtype, target):
    def f(h, x):
        return h.float() * 2 + x, h.double(), h.to(torch.int32), x.to(dtype).float(), h.clone()
    x = edge_values(64)
    h = x.nan_to_num(0.0).clamp(-3e4, 3e4).to(dtype)
    outs = compiled(f, target)(h, x)
    for a, e in zip(outs, f(h, x)):
        assert a.dtype == e.dtype
        torch.testing.assert_close(bits(a), bits(e), rtol=0, atol=0, equal_nan=True)
    assert not explain(f, h, x).fallback_ops


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_arithmetic_in_half_dtypes_rounds_as_eager(dtype, target):
    """PyTorch rounds every half-precision op's result; fxc computes each op in float32 and rounds it the same way
    (tests/capture/torch/test_half_floats.py has the models and the op sample)."""
    def f(h):
        return h * 3 + 1
    h = torch.randn(33).to(dtype)
    torch.testing.assert_close(bits(compiled(f, target)(h)), bits(f(h)), rtol=0, atol=0)
    assert not explain(f, h).fallback_ops


def test_bfloat16_numpy_buffers_are_bits():
    """The runtime's numpy side carries bfloat16 as its raw uint16 patterns."""
    from fxc.ops.common import cast_array
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.4e38, np.nan], np.float32)
    expect = torch.from_numpy(x).bfloat16().view(torch.int16).numpy().view(np.uint16)
    got = cast_array(x, "bfloat16")
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got[:-1], expect[:-1])
    assert np.isnan(cast_array(got, "float32")[-1])


# -- complex values: real [..., 2] tensors inside fxc --------------------------------------------------------
def cplx(*shape, dtype=torch.complex64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g) * 3


FFTS = {
    "fft_ortho": lambda x: torch.fft.fft(x, norm="ortho"),
    "fft_n_dim0": lambda x: torch.fft.fft(x, n=5, dim=0),
    "ifft": lambda x: torch.fft.ifft(x),
    "rfft_odd_n": lambda x: torch.fft.rfft(x, n=7),
    "rfft_forward": lambda x: torch.fft.rfft(x, norm="forward"),
    "irfft": lambda x: torch.fft.irfft(x),
    "irfft_n9": lambda x: torch.fft.irfft(x, n=9, norm="ortho"),
    "hfft": lambda x: torch.fft.hfft(x),
    "ihfft": lambda x: torch.fft.ihfft(x, n=5),
    "fft2": lambda x: torch.fft.fft2(x),
    "ifftn": lambda x: torch.fft.ifftn(x, s=(3, 8), norm="forward"),
    "rfft2": lambda x: torch.fft.rfft2(x),
    "irfftn": lambda x: torch.fft.irfftn(x, s=(4, 10)),
    "hfftn": lambda x: torch.fft.hfftn(x),
    "ihfft2": lambda x: torch.fft.ihfft2(x),
    "fft_abs_angle": lambda x: (torch.fft.fft(x).abs(), torch.fft.fft(x).angle()),
    "round_trip": lambda x: torch.fft.irfft(torch.fft.rfft(x) * 2, n=x.shape[-1]),
}


@pytest.mark.parametrize("name", sorted(FFTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fft_family_matches_eager(name, dtype, target):
    f = FFTS[name]
    x = (torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(1)) * 5).to(dtype)
    torch.testing.assert_close(compiled(f, target)(x), f(x))
    e = explain(f, x)
    assert not e.fallback_ops and not e.failures, e


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_inputs_and_outputs(dtype, target):
    def f(z, w, x):
        return (z * w + 1, z / w, (z - x * 2).conj_physical(), z.abs(), z.angle(), torch.view_as_real(z * z) + 1,
                torch.fft.fft(z, dim=0), torch.fft.ifft2(w), torch.cat([z, w], 1)[:, 1:4], z.real * w.imag)
    z, w = cplx(3, 5, dtype=dtype), cplx(3, 5, dtype=dtype, seed=1)
    x = torch.randn(3, 5, dtype=z.real.dtype)
    for a, e in zip(compiled(f, target)(z, w, x), f(z, w, x)):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e)
    e = explain(f, z, w, x)
    assert not e.fallback_ops and not e.failures, e


def test_real_to_complex_constructors(target):
    def f(x, y):
        return torch.complex(x, y), torch.polar(x.abs(), y), x.cfloat(), x.cdouble(), x.chalf(), torch.view_as_complex(
            torch.stack([x, y], -1) * 2)
    x, y = torch.randn(4, 7), torch.randn(4, 7)
    for a, e in zip(compiled(f, target)(x, y), f(x, y)):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e)
    e = explain(f, x, y)
    assert not e.fallback_ops and not e.failures, e


def test_lazy_conjugate_input_and_stft(target):
    z = cplx(6, 4).conj()
    assert z.is_conj()
    f = lambda z: torch.fft.fft(z) * 2  # noqa: E731
    torch.testing.assert_close(compiled(f, target)(z), f(z))
    s = lambda x: torch.stft(x, 16, hop_length=4, window=torch.hann_window(16), return_complex=True)  # noqa: E731
    x = torch.randn(100)
    torch.testing.assert_close(compiled(s, target)(x), s(x))


def test_unsupported_complex_ops_and_long_ffts_run_eagerly(target):
    def f(z, x):
        return torch.exp(z), torch.fft.fft(x)     # exp of complex: no fxc op; a 2048-point DFT: too long
    z, x = cplx(5), torch.randn(2048)
    for a, e in zip(compiled(f, target)(z, x), f(z, x)):
        torch.testing.assert_close(a, e)
    assert explain(f, z, x).fallback_ops


def test_fft_training_gradients_compile(target):
    """Backward graphs of the FFT family (c2c, where/full/copy/slice_scatter on complex values) compile too."""
    def f(x, w):
        return (torch.fft.rfft(x * w).abs() ** 2).sum() + torch.fft.ifft(torch.fft.fft(x)).real.pow(2).sum()
    x, w = torch.randn(4, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    compiled(f, target)(x, w).backward()
    got = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    f(x, w).backward()
    torch.testing.assert_close(got, (x.grad, w.grad))


def test_complex_reductions_and_fills(target):
    def f(z, c):
        return (z.sum(0), z.sum(), torch.where(c, z, torch.zeros_like(z) + 2j), torch.full((2, 3), 1 + 2j) * z[:2, :3])
    z, c = cplx(4, 5), torch.randn(4, 5) > 0
    for a, e in zip(compiled(f, target)(z, c), f(z, c)):
        torch.testing.assert_close(a, e)
    e = explain(f, z, c)
    assert not e.fallback_ops and not e.failures, e
