"""Graph passes: small functions Graph -> Graph, one per file."""
from .eliminate_common_subexpr import eliminate_common_subexpr
from .eliminate_dead_code import eliminate_dead_code
from .expand_opaque import expand_opaque
from .fold_constants import fold_constants
from .fold_scale_axis import fold_scale_axis
from .infer_types import infer_types
from .materialize_outputs import materialize_outputs
from .pack_weights import pack_weights
from .simplify import simplify
from .use_blocked_layout import use_blocked_layout
from .use_channel_blocks import use_channel_blocks
from .use_winograd import use_winograd

__all__ = ["eliminate_common_subexpr", "eliminate_dead_code", "expand_opaque", "fold_constants", "fold_scale_axis",
           "infer_types", "materialize_outputs", "pack_weights", "simplify", "use_blocked_layout",
           "use_channel_blocks", "use_winograd"]
