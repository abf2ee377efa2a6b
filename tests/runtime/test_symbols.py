"""Symbolic TensorSpec dims as polynomials (issue 42 item 1): a KV cache one longer than its past ('s0+1'), a view
of two symbols ('s0*s1'); bound from the inputs, checked, evaluated for the outputs (fxc/runtime/symbols.py)."""
import pytest

from fxc.backends.llvm.deploy import split_dim
from fxc.errors import InputError
from fxc.runtime.symbols import bind_symbols, dim_terms, dim_value
from fxc.runtime.tensors import TensorSpec
from fxc.symbolic.expr import Sym
from fxc.symbolic.sym import canonical, dim_text

SYMS = [{"name": "s0", "min": 1, "max": 100, "divisor": 1}, {"name": "s1", "min": 1, "max": 100, "divisor": 1}]


@pytest.mark.parametrize("expr, text, value", [
    (lambda a, b: a, "s0", 5), (lambda a, b: a * 4, "4*s0", 20), (lambda a, b: a + 1, "s0+1", 6),
    (lambda a, b: a * b, "s0*s1", 15), (lambda a, b: a - 1, "s0-1", 4),
    (lambda a, b: (a + 1) * b * 2, "2*s0*s1+2*s1", 36)])
def test_text_round_trip(expr, text, value):
    d = canonical(expr(Sym("s0"), Sym("s1")))
    assert dim_text(d) == text and dim_value(text, {"s0": 5, "s1": 3}) == value


def test_bind_affine_and_check_products():
    past = TensorSpec("past", (1, 4, "s0", 8), "float32")
    grown = TensorSpec("grown", (1, 4, "s0+1", 8), "float32")
    rows = TensorSpec("rows", ("s0*s1", 8), "float32")
    tokens = TensorSpec("tokens", ("s1",), "int64")
    assert bind_symbols([grown], [(1, 4, 7, 8)], SYMS[:1]) == {"s0": 6}
    assert bind_symbols([past, tokens, rows], [(1, 4, 3, 8), (5,), (15, 8)], SYMS) == {"s0": 3, "s1": 5}
    with pytest.raises(InputError, match=r"dim s0\*s1 is 14, not 15"):
        bind_symbols([past, tokens, rows], [(1, 4, 3, 8), (5,), (14, 8)], SYMS)
    with pytest.raises(InputError, match="s0 = 2 here but 3 in another input"):
        bind_symbols([past, grown], [(1, 4, 3, 8), (1, 4, 3, 8)], SYMS[:1])
    with pytest.raises(InputError, match="outside the compiled range"):
        bind_symbols([grown], [(1, 4, 102, 8)], SYMS[:1])


def test_only_multiples_of_one_symbol_split():
    assert split_dim("4*s0") == (4, "s0") and dim_terms("s0-1") == ((1, ("s0",)), (-1, ()))
    for bad in ("s0+1", "s0*s1"):
        with pytest.raises(ValueError):
            split_dim(bad)
    with pytest.raises(ValueError):
        dim_terms("s0**2")
