"""CPU schedules (register tiles over the target's vector registers): grouped_conv (row tiles for grouped and
short-reduction convs), column_strips (strips of long conv rows)."""
