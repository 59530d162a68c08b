"""Triton attention kernels over the token-index KV pool and fused decoder-layer steps, with
torch references.

Importing this package does not import triton; the kernels load on first use.
"""

_TRITON = (
    "extend_attention_fwd",
    "decode_attention_fwd",
    "apply_token_bitmask_inplace",
    "fill_kv_indices",
)
_FUSED = ("rms_norm", "rotary_qkv_inplace", "silu_mul")
_REFERENCE = (
    "extend_attention_ref",
    "decode_attention_ref",
    "apply_token_bitmask_inplace_ref",
    "fill_kv_indices_ref",
    "rms_norm_ref",
    "rotary_qkv_inplace_ref",
    "silu_mul_ref",
)


def __getattr__(name):
    if name in _TRITON:
        from kernels import triton_ops

        return getattr(triton_ops, name)
    if name in _FUSED:
        from kernels import fused_ops

        return getattr(fused_ops, name)
    if name in _REFERENCE:
        from kernels import reference

        return getattr(reference, name)
    raise AttributeError(name)


__all__ = [*_TRITON, *_FUSED, *_REFERENCE]
