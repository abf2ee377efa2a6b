"""Movement / injective ops: reshape, permute, expand, slice, cat, pad, gather..."""
