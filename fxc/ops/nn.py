"""Neural-network ops: convolution, pooling, normalisation, embedding, interpolation..."""
