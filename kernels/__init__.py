"""Triton attention kernels over the token-index KV pool, with torch references.

Importing this package does not import triton; the kernels load on first use.
"""

_TRITON = (
    "extend_attention_fwd",
    "decode_attention_fwd",
    "apply_token_bitmask_inplace",
    "fill_kv_indices",
)
_REFERENCE = (
    "extend_attention_ref",
    "decode_attention_ref",
    "apply_token_bitmask_inplace_ref",
    "fill_kv_indices_ref",
)


def __getattr__(name):
    if name in _TRITON:
        from kernels import triton_ops

        return getattr(triton_ops, name)
    if name in _REFERENCE:
        from kernels import reference

        return getattr(reference, name)
    raise AttributeError(name)


__all__ = [*_TRITON, *_REFERENCE]
