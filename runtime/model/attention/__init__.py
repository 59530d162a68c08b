"""Attention over the token-index KV pool: one module per backend, `registry` picks one."""
