"""`tvm.transform.PassContext` and `relay.build_config`: TVM's optimisation level and disabled passes, as the fxc
build options they mean.

    opt_level 3 (and 4)   fxc's full pipeline (the defaults)
    opt_level 1, 2        without the layout passes TVM runs at level 3 (AlterOpLayout): blocked_layout=False,
                          winograd="off"; TVM's default level is 2, and so is the facade's
    opt_level 0           also without fusion: fuse=False
    disabled_pass         "FuseOps" -> fuse=False; "AlterOpLayout" -> blocked_layout=False, winograd="off"; the Relay
                          passes fxc has no switch for are accepted (they change speed, never results) with a note

Every choice changes speed only: the facade's outputs are the same at every level, up to float rounding.
"""
from __future__ import annotations

from .finder import module_getattr
from .ndarray import note
from .unsupported import UnsupportedAPIError, missing_member

NO_LAYOUT = {"blocked_layout": False, "winograd": "off"}
SWITCHES = {"FuseOps": {"fuse": False}, "AlterOpLayout": NO_LAYOUT}
# Relay passes fxc runs no counterpart of, or one that cannot be switched off: disabling them changes nothing here
WITHOUT_SWITCH = {"FoldConstant", "SimplifyInference", "FoldScaleAxis", "ForwardFoldScaleAxis",
                  "BackwardFoldScaleAxis", "CanonicalizeOps", "CanonicalizeCast", "EliminateCommonSubexpr",
                  "CombineParallelConv2D", "CombineParallelDense", "CombineParallelBatchMatmul", "SimplifyExpr",
                  "DeadCodeElimination", "DynamicToStatic", "Legalize", "Inline", "LabelOps", "PlanDevices",
                  "SplitArgs", "FastMath", "FoldExplicitPadding", "ConvertLayout"}


class PassContext:
    """`with tvm.transform.PassContext(opt_level=3, disabled_pass=[...]):` around `relay.build`."""

    _stack: list = []

    def __init__(self, opt_level: int = 2, required_pass=None, disabled_pass=None, instruments=None, config=None,
                 trace=None):
        if not isinstance(opt_level, int) or not 0 <= opt_level <= 4:
            raise UnsupportedAPIError(f"PassContext(opt_level={opt_level!r})", "opt_level is an int from 0 to 4")
        for name, given in (("required_pass", required_pass), ("instruments", instruments), ("config", config),
                            ("trace", trace)):
            if given:
                raise UnsupportedAPIError(f"PassContext({name}=...)", "fxc runs its own pass pipeline; leave "
                                          f"{name} out (FXC_DEBUG=1 prints fxc's pass timeline, 2 the graph after "
                                          "each pass)")
        self.opt_level = opt_level
        self.disabled_pass = list(disabled_pass or ())
        for name in self.disabled_pass:
            if name not in SWITCHES and name not in WITHOUT_SWITCH:
                raise UnsupportedAPIError(f"PassContext(disabled_pass=[{name!r}])",
                                          f"fxc can switch off {', '.join(SWITCHES)}; the Relay passes "
                                          f"{', '.join(sorted(WITHOUT_SWITCH))} have no switch in fxc (disabling "
                                          f"them changes nothing)")

    def fxc_options(self) -> dict:
        """The fxc build options this context means (see the module doc)."""
        options = {}
        if self.opt_level < 3:
            options.update(NO_LAYOUT)
        if self.opt_level == 0:
            options["fuse"] = False
        ignored = []
        for name in self.disabled_pass:
            options.update(SWITCHES.get(name, {}))
            if name in WITHOUT_SWITCH:
                ignored.append(name)
        if ignored:
            note(f"disabled_pass {ignored}: fxc has no switch for these Relay passes; they change speed only")
        return options

    def __enter__(self):
        PassContext._stack.append(self)
        return self

    def __exit__(self, *exc):
        PassContext._stack.remove(self)

    @staticmethod
    def current() -> "PassContext":
        """The innermost active context, else the default one (opt_level 2, as TVM's)."""
        return PassContext._stack[-1] if PassContext._stack else PassContext()

    __getattr__ = missing_member("tvm.transform.PassContext")


def build_config(opt_level: int = 2, required_pass=None, disabled_pass=None, trace=None) -> PassContext:
    """`relay.build_config(opt_level=3)` (before TVM 0.8): a PassContext."""
    return PassContext(opt_level=opt_level, required_pass=required_pass, disabled_pass=disabled_pass, trace=trace)


__getattr__ = module_getattr("tvm.transform", default="fxc runs its own pass pipeline (fxc/relay_like/"
                                "pipeline.py); the facade offers PassContext only")
