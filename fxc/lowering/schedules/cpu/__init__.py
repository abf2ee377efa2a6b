"""CPU-family schedules: explicit vector loop IR over the target's Caps.lanes and vector registers.

- default.py: `schedule_root`, the family's default: injective roots (vector rows, register transposes of packs)
  and reductions (vector accumulators, register tiles), a reduction handed to the schedule of its compute's kind;
- gemm.py: register tiles of conv2d_packed / matmul_packed (and the 1x1 conv as a GEMM over positions);
- depthwise.py: depthwise convs in NCHW and NCHW16c;
- depthwise_i8.py: the integer depthwise conv (NCHW bytes, widened into phase-blocked planes, full vectors);
- winograd.py: conv2d_winograd (F(4x4, 3x3) and F(2x2, 3x3));
- grouped_conv.py: row tiles for grouped convs and short-reduction (1-D) convs;
- column_strips.py: strips of conv rows whose input does not stay cached.
- vectorize.py: the strides of indices and the explicit vector forms of expressions and `vectorize` loops (used
  by every schedule here, the GPU GEMV schedule and the lowering).

SCHEDULES maps each kind to its schedule (fxc/lowering/schedules: the registry), RULES the layout rules the graph
passes ask through `fxc.lowering.schedules.rule("cpu", name)`.
"""
from .default import schedule_root
from .depthwise import schedule_depthwise, schedule_depthwise_blocked
from .depthwise_i8 import schedule_depthwise_i8
from .gemm import acc_vectors, conv1x1_as_gemm, schedule_conv2d_packed, schedule_matmul_packed
from .grouped_conv import schedule_grouped_conv2d
from .winograd import fits, lane_vectors, schedule_conv2d_winograd

SCHEDULES = {
    "root": schedule_root,
    "conv2d_packed": schedule_conv2d_packed,
    "matmul_packed": schedule_matmul_packed,
    "depthwise_conv2d": schedule_depthwise,
    "depthwise_blocked": schedule_depthwise_blocked,
    "depthwise_conv2d_i8": schedule_depthwise_i8,
    "conv2d_winograd": schedule_conv2d_winograd,
    "grouped_conv2d": schedule_grouped_conv2d,
}

RULES = {
    "acc_vectors": acc_vectors,                 # (caps) -> accumulator vectors of a register tile
    "conv1x1_as_gemm": conv1x1_as_gemm,         # (channels, out_channels, positions) -> runs as the GEMM
    "winograd_fits": fits,                      # (channels, ow, m, bf16) -> a tile row's V fits the task's budget
    "winograd_lane_vectors": lane_vectors,      # (tile columns, channel blocks, caps) -> nv
}
