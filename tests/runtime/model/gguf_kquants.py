"""Test support: GGUF K-quant blocks written from float values (Q4_K, Q5_K, Q6_K; Q4_0, Q5_0,
Q5_1 and Q8_0 by gguf's quantizer), and a copy of a GGUF file with some tensors re-encoded,
for end-to-end runs of K-quant files without shipping one. The encoders round simply (a scale from each run's extremes), not with
llama.cpp's search: what the tests check is that the engine computes with the written values.
"""

from __future__ import annotations

import numpy as np


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def _ratio(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.divide(x, scale, out=np.zeros_like(x), where=scale > 0)


def _pack_k_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and minimums a super-block [..., 8] as K-quants' 12 bytes."""
    low = (sc[..., :4] | ((sc[..., 4:] >> 4) << 6)).astype(np.uint8)
    mid = (mn[..., :4] | ((mn[..., 4:] >> 4) << 6)).astype(np.uint8)
    high = ((sc[..., 4:] & 15) | ((mn[..., 4:] & 15) << 4)).astype(np.uint8)
    return np.concatenate([low, mid, high], axis=-1)


def _scaled_groups(x: np.ndarray, levels: int):
    """Groups of 32 with a scale and a minimum each, both as 6-bit multiples of a super-block's
    f16 d and dmin: (d, dmin, sc, mn, codes in 0..levels)."""
    rows, cols = x.shape
    g = x.reshape(rows, cols // 256, 8, 32).astype(np.float32)
    low = np.minimum(g.min(axis=3), 0)
    span = (g.max(axis=3) - low) / levels
    d = _f16(span.max(axis=2, keepdims=True) / 63).astype(np.float32)
    dmin = _f16(-low.min(axis=2, keepdims=True) / 63).astype(np.float32)
    sc = np.clip(np.rint(_ratio(span, d)), 0, 63).astype(np.uint8)
    mn = np.clip(np.rint(_ratio(-low, dmin)), 0, 63).astype(np.uint8)
    step = (d * sc)[..., None]
    codes = np.rint(_ratio(g + (dmin * mn)[..., None], step))
    return d, dmin, sc, mn, np.clip(codes, 0, levels).astype(np.uint8)


def _heads(d: np.ndarray, dmin: np.ndarray) -> np.ndarray:
    return np.concatenate([_f16(d).view(np.uint8), _f16(dmin).view(np.uint8)], axis=-1)


def encode_q4_k(x: np.ndarray) -> np.ndarray:
    """[rows, cols] float -> Q4_K bytes [rows, cols / 256 * 144]."""
    d, dmin, sc, mn, q = _scaled_groups(x, 15)
    pairs = q.reshape(*q.shape[:2], 4, 2, 32)
    qs = (pairs[:, :, :, 0] | (pairs[:, :, :, 1] << 4)).reshape(*q.shape[:2], 128)
    return np.concatenate([_heads(d, dmin), _pack_k_scales(sc, mn), qs], -1).reshape(len(x), -1)


def encode_q5_k(x: np.ndarray) -> np.ndarray:
    """[rows, cols] float -> Q5_K bytes [rows, cols / 256 * 176]."""
    d, dmin, sc, mn, q = _scaled_groups(x, 31)
    bits = ((q >> 4) << np.arange(8, dtype=np.uint8)[:, None]).sum(axis=2, dtype=np.uint8)
    pairs = (q & 15).reshape(*q.shape[:2], 4, 2, 32)
    qs = (pairs[:, :, :, 0] | (pairs[:, :, :, 1] << 4)).reshape(*q.shape[:2], 128)
    parts = [_heads(d, dmin), _pack_k_scales(sc, mn), bits, qs]
    return np.concatenate(parts, axis=-1).reshape(len(x), -1)


def encode_q6_k(x: np.ndarray) -> np.ndarray:
    """[rows, cols] float -> Q6_K bytes [rows, cols / 256 * 210]."""
    rows, cols = x.shape
    g = x.reshape(rows, cols // 256, 16, 16).astype(np.float32)
    step = np.abs(g).max(axis=3) / 31
    d = _f16(step.max(axis=2, keepdims=True) / 127).astype(np.float32)
    sc = np.clip(np.rint(_ratio(step, d)), 0, 127).astype(np.int8)
    q = np.clip(np.rint(_ratio(g, (d * sc)[..., None])), -32, 31).astype(np.int16) + 32
    q = q.astype(np.uint8).reshape(rows, cols // 256, 2, 4, 32)  # [half][i][l]: 32 i + l
    low, high = q & 15, q >> 4
    ql = low[:, :, :, :2] | (low[:, :, :, 2:] << 4)  # [half][byte l or l + 32][l]
    qh = (high << (2 * np.arange(4, dtype=np.uint8))[:, None]).sum(axis=3, dtype=np.uint8)
    parts = [ql.reshape(rows, -1, 128), qh.reshape(rows, -1, 64), sc.view(np.uint8)]
    parts.append(_f16(d).view(np.uint8))
    return np.concatenate(parts, axis=-1).reshape(rows, -1)


def _gguf_encoder(kind: str):
    """gguf's own quantizer, for the types it writes (Q4_0, Q5_0, Q5_1, Q8_0)."""

    def encode(x: np.ndarray) -> np.ndarray:
        from gguf import GGMLQuantizationType
        from gguf.quants import quantize

        return quantize(x.astype(np.float32), GGMLQuantizationType[kind])

    return encode


ENCODERS = {"Q4_K": encode_q4_k, "Q5_K": encode_q5_k, "Q6_K": encode_q6_k}
ENCODERS.update({kind: _gguf_encoder(kind) for kind in ("Q4_0", "Q5_0", "Q5_1", "Q8_0")})


def rewrite_gguf(src: str, dst: str, types: dict[str, str]) -> None:
    """Copy GGUF `src` to `dst` with each tensor named in `types` re-encoded to that type
    (from its values as gguf reads them); every other tensor and all metadata as they are."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize

    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        kind = types.get(t.name)
        if kind is None:
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
            continue
        shape = [int(n) for n in reversed(t.shape)]
        values = dequantize(t.data, t.tensor_type).reshape(shape)
        raw = ENCODERS[kind](values)
        writer.add_tensor(t.name, raw, raw_dtype=GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
