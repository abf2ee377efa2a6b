"""Graph passes, one per file, each `pass(graph, ctx) -> graph` (ctx: relay_like/context.PassContext), and the plan
steps after them (fusion, hoisting, memory planning: `step(planned, ctx) -> planned`, relay_like/planned.py)."""
from .eliminate_common_subexpr import eliminate_common_subexpr
from .eliminate_dead_code import eliminate_dead_code
from .expand_opaque import expand_opaque
from .fold_constants import fold_constants
from .fold_scale_axis import fold_scale_axis
from .fuse_ops import fuse_groups
from .hoist import hoist_weights
from .infer_types import infer_types
from .materialize_outputs import materialize_outputs
from .pack_weights import pack_weights
from .partition import describe_partition, partition_external
from .plan_memory import plan_buffers, split_prepack
from .quantize import quantize_chains
from .simplify import simplify
from .use_bf16 import use_bf16, use_bf16_blocked
from .use_blocked_layout import use_blocked_layout
from .use_channel_blocks import use_channel_blocks
from .use_int8 import use_int8
from .use_int8_blocks import use_int8_blocks
from .use_winograd import use_winograd

__all__ = ["describe_partition", "eliminate_common_subexpr", "eliminate_dead_code", "expand_opaque", "fold_constants",
           "fold_scale_axis", "fuse_groups", "hoist_weights", "infer_types", "materialize_outputs", "pack_weights",
           "partition_external", "plan_buffers", "quantize_chains", "simplify", "split_prepack", "use_bf16",
           "use_bf16_blocked", "use_blocked_layout", "use_channel_blocks", "use_int8",
           "use_int8_blocks", "use_winograd"]
