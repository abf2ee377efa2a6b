"""A CPU module's constants start on a 64-byte line wherever numpy placed the weights it was given (as in an
exported artifact): two builds of the same code then read their weights the same way."""
import numpy as np
import torch

import fxc
from fxc.runtime.cpu.library import aligned_array


def test_aligned_array_copies_only_what_is_misaligned():
    raw = np.arange(40, dtype=np.float32)
    start = (-raw.ctypes.data) % 64 // 4
    for a in (raw[start + 1:start + 11], raw[start:start + 12].reshape(3, 4).T, np.arange(3, dtype=np.int8)[1:]):
        b = aligned_array(a)
        assert b.ctypes.data % 64 == 0 and b.flags.c_contiguous and b.dtype == a.dtype and b.shape == a.shape
        np.testing.assert_array_equal(b, a)
    at_line = raw[start:start + 8]
    assert aligned_array(at_line) is at_line        # already on a line: no copy
    empty = np.zeros((0, 3), np.int8)
    assert aligned_array(empty).shape == (0, 3)     # nothing to read: as it is


def test_a_modules_constants_are_aligned():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(5 * 36, 7))
    x = torch.randn(2, 3, 8, 8)
    compiled = fxc.from_torch(m.eval(), (x,))
    consts = compiled.module.consts
    assert consts and all(c.ctypes.data % 64 == 0 for c in consts), [c.ctypes.data % 64 for c in consts]
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-5)
