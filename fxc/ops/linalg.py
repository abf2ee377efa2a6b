"""Linear algebra: matmul / bmm with transpose flags."""
