"""radixgen lang package."""
