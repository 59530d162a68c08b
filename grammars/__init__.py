"""radixgen grammars package."""
