"""radixgen kernels package."""
