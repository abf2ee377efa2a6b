"""Scalar expressions and symbolic dimensions: the base layer every stage imports (capture, the graph IR, types,
ops, lowering, backends). expr.py: the hash-consed expression nodes, size symbols and their order; sym.py: the
algebra of symbolic dims (one canonical form, ranges, evaluation). Imports nothing else of fxc."""
