"""The model: config, loading (GGUF too), layers, architectures, attention backends, the runner."""
