"""The backend registry: every kind fxc builds has one Backend, and every object a Backend or the runtime's module
table names by string ("package.module:Name", imported lazily because device libraries are optional) exists."""
import pytest

from fxc.backends import BACKENDS, backend_of
from fxc.backends.backend import FAMILIES, FORMS
from fxc.errors import TargetError
from fxc.runtime.modules import MODULES, by_name, module_class
from fxc.target import KINDS, Target


@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_every_backend_names_objects_that_exist(kind):
    backend = BACKENDS[kind]
    assert backend.kind == kind and backend.family in FAMILIES and backend.form in FORMS
    assert backend.module_class(False) is module_class(kind)
    assert isinstance(backend.module_class(True), type)
    if backend.device_api:
        assert callable(by_name(f"{backend.device_api}:open_target"))
    if backend.family == "gpu":
        assert backend.render is not None
    else:
        assert backend.link is not None and backend.compiler is not None


def test_every_built_kind_has_a_backend_and_a_module_class():
    assert set(BACKENDS) == set(MODULES) <= set(KINDS)


def test_a_kind_without_a_backend_is_a_target_error():
    assert not set(KINDS) - set(BACKENDS) - {"clml"}        # (clml parses as "opencl -libs=clml")
    with pytest.raises(TargetError, match="can be built here"):
        backend_of(Target("vulkan"))        # (a kind no backend serves, as a newer fxc's artifact could name)
