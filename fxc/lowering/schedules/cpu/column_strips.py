"""Column strips for register-tiled convs over long rows (1-D audio convs run as conv2d over [N, C, 1, W]).

conv2d_packed's work items are (image, channel-block group, output row): each runs the whole output row for one
group of output channels, reading every input column of the row it needs. When that input (C channels x KH rows x
the row's width) does not stay in the core's cache, every group reads it from memory again: wav2vec2's kernel-3
stride-2 conv over [1, 512, 1, 3199] (6.5 MB of input, 16 groups) streams 100 MB. Strips cut the output row into
parts that each read a slab of the input small enough to stay cached, and put the groups innermost among the
parallel work items, so the groups that follow one another on a thread reuse one slab while the (contiguous,
prefetched) packed weight streams instead.

`column_parts` takes the conv's shapes and the target's capabilities (`Caps.cache_bytes`) and gives the number of
strips (1: leave the schedule as it is); schedule_conv2d_packed passes it to row_tiles as its `chunk`.
"""
from __future__ import annotations

SLAB_SHARE = 2      # a strip's input slab takes at most 1/SLAB_SHARE of the cache: the packed weight's block and
                    # the output tile stream beside it


def column_parts(in_row_bytes: int, groups: int, whole_tiles: int, caps) -> int:
    """Strips to cut an output row of `whole_tiles` register tiles into, when each of `groups` channel-block groups
    would otherwise read the row's whole input (`in_row_bytes`: channels x kernel rows x input width x itemsize)
    again: enough that a strip's slab fits SLAB_SHARE-th of `caps.cache_bytes`, at most one per two whole tiles;
    1 (no strips) for a row that stays cached or a single group."""
    budget = caps.cache_bytes // SLAB_SHARE
    if groups <= 1 or in_row_bytes <= budget:
        return 1
    return max(1, min(-(-in_row_bytes // budget), whole_tiles // 2))
