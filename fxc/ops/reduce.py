"""Reductions (sum, mean, max, min, prod, argmax...), softmax, log-softmax, var/std."""
