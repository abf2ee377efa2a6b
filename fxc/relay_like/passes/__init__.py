"""Graph passes: small functions Graph -> Graph, one per file."""
from .eliminate_common_subexpr import eliminate_common_subexpr
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_scale_axis import fold_scale_axis
from .infer_types import infer_types
from .materialize_outputs import materialize_outputs
from .simplify import simplify
from .pack_weights import pack_weights
from .use_winograd import use_winograd
from .use_blocked_layout import use_blocked_layout
