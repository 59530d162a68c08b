"""Weight-only quantized weights for the CPU: int8 or int4, in groups of 32 along each row.

A `QuantizedTensor` is a row-local code for a [rows, cols] weight (every row quantized on its
own), so the blocks of a merged layer (q|k|v, gate|up) are quantized one by one and their rows
concatenated:

- int8: w = q * scale[row, group] (+ zero[row, group] where present), q in [-128, 127]; the
  scales may be per half group of 16 (`split`). GGUF Q8_0 blocks (f16 d, 32 codes) map onto it
  exactly, and so do Q6_K (scales per 16) and Q5_K (5-bit codes, scales and minimums per 32)
  up to one float32 rounding of d * scale and dmin * min; int4 codes widen to it exactly.
- int4: w = (q - 8) * scale[row, group] + zero[row, group], q in [0, 15], two codes a byte in
  GGUF's layout. GGUF Q4_0 (w = (q - 8) * d), Q4_1 (w = q * d + m, so zero = m + 8 d) and
  Q4_K blocks map onto it (Q4_1 and Q4_K to one float32 rounding of the zero point).

So a file's own codes are kept, not rounded a second time.

`QuantizedMatmul` runs the few rows of a decode step on our AVX2 kernels over the codes
themselves (runtime/model/qgemv.c; activations rounded to int16 per group of 32) or, where
those do not build, on torch's weight-only kernel for int4 (`_weight_int4pack_mm_for_cpu`,
bf16 activations and scales) and a bf16 copy for int8; long extends run a dense GEMM over the
dequantized weight, where the kernels lose (benchmarks/bench_cpu.py). On CPUs that multiply
bf16 themselves (AMX tiles or AVX-512 BF16, `tile_kind`), every product of more than one row
runs on a bf16 copy of the weight instead.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from runtime.model import qgemv
from runtime.model.config import MERGED_PROJECTIONS
from runtime.model.qgemv import GROUP, pack_int4, unpack_int4

# Rows up to which the weight-only kernels beat dequantize + dense GEMM on a 2-core AVX2 CPU
# (576 x 3072 layer: int8 even at 64 rows, int4 loses past ~32).
_KERNEL_ROWS = {"int8": 64, "int4": 32}
NATIVE_ROWS = 16  # rows up to which our kernels beat dequantize + dense GEMM
# With bf16 tiles (`tile_kind`): products of up to TILE_CODE_ROWS rows run on the int4/int8
# codes (one row reads a quarter of the bytes), larger ones on the tiles; decode steps of up
# to TILE_STEP_ROWS rows run in one call.
TILE_CODE_ROWS = 1
TILE_STEP_ROWS = 64
_CHUNK_ROWS = 4096


@functools.cache
def amx_bf16() -> bool:
    """Whether this CPU multiplies bf16 AMX tiles (Intel Xeon since Sapphire Rapids) and Linux
    lets us use them; RADIXGEN_NO_AMX=1 says no (576 x 3072 layer, 2 threads, 16 rows: 0.08 ms
    on the tiles against 0.58 ms on the int4 codes; one row: 0.09 against 0.06 ms, and the LM
    head 1.53 against 0.89 ms)."""
    if os.environ.get("RADIXGEN_NO_AMX") or "amx_bf16" not in qgemv.cpu_flags():
        return False
    lib = qgemv.load()
    return lib is not None and lib.amx_enable() == 0


@functools.cache
def tile_kind() -> str | None:
    """What multiplies a quantized weight's bf16 copy (laid out as tiles, qgemv.py
    `bf16_tiles`) on this CPU: "amx", "avx512" (AVX-512 BF16 dot products, qgemv_bf16.c: AMD
    Zen 4, Intel Cooper Lake) or None, where every product runs on the codes.
    RADIXGEN_NO_BF16_TILES=1 says None. Where there is one, each quantized weight also keeps
    that copy (twice int8's bytes, four times int4's), and every product of more than
    TILE_CODE_ROWS rows runs on it: on a Zen 4 EPYC, 2 threads, 576 x 3072, 16 rows 0.17 ms
    against 0.47 ms on the int4 codes, 64 rows 0.67 against 2.2 (0.80 in oneDNN's bf16 GEMM)."""
    if os.environ.get("RADIXGEN_NO_BF16_TILES") or qgemv.load() is None:
        return None
    if amx_bf16():
        return "amx"
    return "avx512" if {"avx512f", "avx512_bf16"} <= qgemv.cpu_flags() else None


def native_rows() -> int:
    """Rows up to which a decode batch runs on our kernels (runtime/model/decode_step.py)."""
    return TILE_STEP_ROWS if tile_kind() else NATIVE_ROWS


class QuantizationError(ValueError):
    """A --quantization choice that cannot apply to this model or device."""


@dataclass
class QuantizedTensor:
    """Row-local quantized [rows, cols] weight, `scale` [rows, cols // 32]. int8: `q` int8
    [rows, cols], w = q * scale + zero, `zero` [rows, cols // 32] or None (0), `scale` may be
    [rows, cols // 16] (`split`). int4: `q` uint8 [rows, cols // 2] (byte j of a group holds
    element j in its low nibble and element j + 16 in its high one, GGUF's layout), w = (q -
    8) * scale + zero, `zero` [rows, cols // 32]."""

    kind: str
    q: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor | None = None
    # int8 codes of a file's matrix of more than 4 bits, read to keep the file's precision
    # (read_gguf_weights): a layer of int4 takes int8 instead of rounding them to 4 bits
    finer: bool = False

    @property
    def rows(self) -> int:
        return self.q.shape[0]

    @property
    def cols(self) -> int:
        return self.q.shape[1] * (2 if self.kind == "int4" else 1)

    @property
    def split(self) -> bool:
        """Scales per half group of 16 (int8 only)."""
        return self.scale.shape[1] * GROUP == 2 * self.cols

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        if self.rows > _CHUNK_ROWS:  # a slice at a time: no float32 copy of a large matrix
            out = torch.empty(self.rows, self.cols, dtype=dtype)
            for start in range(0, self.rows, _CHUNK_ROWS):
                part = self.narrow_rows(start, min(_CHUNK_ROWS, self.rows - start))
                out[start : start + part.rows] = part.dequantize(dtype)
            return out
        if self.kind == "int8":
            size = GROUP // 2 if self.split else GROUP
            w = self.q.to(torch.float32).view(self.rows, -1, size) * self.scale[..., None]
            if self.zero is not None:
                w = w.view(self.rows, -1, GROUP) + self.zero[..., None]
            return w.reshape(self.rows, self.cols).to(dtype)
        codes = unpack_int4(self.q).to(torch.float32).view(self.rows, -1, GROUP)
        w = (codes - 8) * self.scale[..., None] + self.zero[..., None]
        return w.view(self.rows, self.cols).to(dtype)

    def narrow_rows(self, start: int, length: int) -> QuantizedTensor:
        return QuantizedTensor(
            self.kind,
            self.q.narrow(0, start, length),
            self.scale.narrow(0, start, length),
            None if self.zero is None else self.zero.narrow(0, start, length),
        )


def quantize(w: torch.Tensor, kind: str) -> QuantizedTensor:
    """Round a float [rows, cols] weight to `kind` (symmetric int8 groups; min/max int4
    groups)."""
    if w.shape[0] > _CHUNK_ROWS:  # a large matrix (the embedding) a slice at a time
        return concat_rows([quantize(part, kind) for part in w.split(_CHUNK_ROWS)])
    if w.shape[1] % GROUP:
        raise QuantizationError(f"{kind} needs rows of a multiple of {GROUP} values, got {w.shape}")
    w = w.to(torch.float32)
    groups = w.view(w.shape[0], -1, GROUP)
    if kind == "int8":
        scale = groups.abs().amax(dim=2).clamp(min=1e-12) / 127
        q = torch.round(groups / scale[..., None]).clamp(-127, 127).to(torch.int8)
        return QuantizedTensor("int8", q.view(w.shape), scale)
    low, high = groups.amin(dim=2), groups.amax(dim=2)
    scale = ((high - low) / 15).clamp(min=1e-12)
    codes = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15)
    return QuantizedTensor(
        "int4", pack_int4(codes.to(torch.uint8).view(w.shape)), scale, low + 8 * scale
    )


def _halves(raw: np.ndarray, start: int) -> np.ndarray:
    """The f16 at bytes start, start + 1 of each block of `raw` [rows, blocks, bytes], as
    float32 [rows, blocks]."""
    return raw[..., start : start + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _int4(q: torch.Tensor, scale: np.ndarray, m: np.ndarray) -> QuantizedTensor:
    """int4 codes with w = q * scale + m per group (so zero = m + 8 * scale)."""
    scale_t = torch.from_numpy(np.ascontiguousarray(scale))
    return QuantizedTensor(
        "int4", q, scale_t, torch.from_numpy(np.ascontiguousarray(m)) + 8 * scale_t
    )


def from_gguf_q4(blocks: np.ndarray, kind_name: str, rows: int, cols: int) -> QuantizedTensor:
    """A GGUF Q4_0 / Q4_1 tensor (raw bytes, a row of blocks per weight row) as int4: its own
    codes and scales. Q4_0 block: f16 d, 16 bytes (w = d * (q - 8)); Q4_1 block: f16 d, f16 m,
    16 bytes (w = d * q + m)."""
    head = 2 if kind_name == "Q4_0" else 4
    raw = np.ascontiguousarray(blocks).reshape(rows, cols // GROUP, head + GROUP // 2)
    d = _halves(raw, 0)
    m = _halves(raw, 2) if head == 4 else -8 * d
    return _int4(torch.from_numpy(raw[:, :, head:].reshape(rows, cols // 2).copy()), d, m)


def from_gguf_q4_k(blocks: np.ndarray, rows: int, cols: int) -> QuantizedTensor:
    """A GGUF Q4_K tensor as int4, its own codes: each super-block of 256 (f16 d and dmin, 12
    bytes of 6-bit scales and minimums, 128 bytes of codes) is 8 groups of 32 with w = q *
    (d * sc) - dmin * mn, both products exact in float32 (kept as a zero point, a value can
    differ from the file's by one float32 rounding). Bytes 32c..32c+31 of the codes hold
    groups 2c (low nibbles) and 2c + 1 (high nibbles)."""
    raw = np.ascontiguousarray(blocks).reshape(rows, cols // 256, 144)
    scale, m, codes = _k_groups(raw, 16)
    codes = codes.reshape(rows, cols)
    return _int4(pack_int4(torch.from_numpy(np.ascontiguousarray(codes))), scale, m)


def widened(w: QuantizedTensor, split: bool, zero: bool) -> QuantizedTensor:
    """`w` as int8 codes of the same values, exactly: int4 codes q become q - 8 (with their
    zero points), and scales per group repeat for each half when `split`, zero points of 0
    appear when `zero`."""
    if w.kind == "int4":
        q = (unpack_int4(w.q).to(torch.int16) - 8).to(torch.int8)
        w = QuantizedTensor("int8", q, w.scale, w.zero, w.finer)
    scale, offset = w.scale, w.zero
    if split and not w.split:
        scale = scale.repeat_interleave(2, dim=1)
    if zero and offset is None:
        offset = torch.zeros(w.rows, w.cols // GROUP)
    return QuantizedTensor("int8", w.q, scale, offset, w.finer)


def in_one_form(parts: list[QuantizedTensor]) -> list[QuantizedTensor]:
    """int8 parts (and int4 ones, widened) in one form, for their rows to be concatenated:
    split scales and zero points where any part has them."""
    split = any(p.kind == "int8" and p.split for p in parts)
    zero = any(p.zero is not None for p in parts)
    return [widened(p, split, zero) for p in parts]


def _k_groups(raw: np.ndarray, nibbles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What Q4_K and Q5_K super-blocks (`raw` [rows, blocks, bytes]) share: f16 d and dmin, 12
    bytes of 6-bit scales and minimums from byte 4, and 128 bytes of low nibbles from byte
    `nibbles` (bytes 32c..32c+31 hold groups 2c (low) and 2c + 1 (high)). Returns the groups'
    scale d * sc and zero -dmin * mn [rows, groups] and the nibbles [rows, blocks, 8, 32]."""
    rows, blocks = raw.shape[:2]
    d, dmin = _halves(raw, 0)[..., None], _halves(raw, 2)[..., None]
    low, mid, high = raw[..., 4:8], raw[..., 8:12], raw[..., 12:16]
    sc = np.concatenate([low & 63, (high & 15) | ((low >> 6) << 4)], axis=-1)
    mn = np.concatenate([mid & 63, (high >> 4) | ((mid >> 6) << 4)], axis=-1)
    scale = (d * sc.astype(np.float32)).reshape(rows, blocks * 8)
    zero = -(dmin * mn.astype(np.float32)).reshape(rows, blocks * 8)
    qs = raw[..., nibbles : nibbles + 128].reshape(rows, blocks, 4, 1, 32)
    codes = np.concatenate([qs & 15, qs >> 4], axis=3).reshape(rows, blocks, 8, 32)
    return scale, zero, codes


def from_gguf_q5_k(blocks: np.ndarray, rows: int, cols: int) -> QuantizedTensor:
    """A GGUF Q5_K tensor as int8, its own codes: each super-block of 256 (f16 d and dmin, 12
    bytes of 6-bit scales and minimums, 32 bytes of fifth bits, 128 of low nibbles) is 8
    groups of 32 with w = q * (d * sc) - dmin * mn, q in [0, 31]. Bytes 32c..32c+31 of the
    nibbles hold groups 2c (low) and 2c + 1 (high); bit 2c (2c + 1) of byte l of the fifth bits
    is the high bit of element l of group 2c (2c + 1)."""
    raw = np.ascontiguousarray(blocks).reshape(rows, cols // 256, 176)
    scale, zero, low = _k_groups(raw, 48)
    high = raw[..., 16:48][:, :, None, :] >> np.arange(8, dtype=np.uint8)[:, None] & 1
    codes = (low | (high << 4)).astype(np.int8).reshape(rows, cols)
    return QuantizedTensor(
        "int8", torch.from_numpy(codes), torch.from_numpy(scale), torch.from_numpy(zero)
    )


def from_gguf_q6_k(blocks: np.ndarray, rows: int, cols: int) -> QuantizedTensor:
    """A GGUF Q6_K tensor as int8 with scales per 16, its own codes: each super-block of 256
    (128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, f16 d) holds w = (q - 32)
    * (d * sc[j]) for the 16 runs of 16. In each half of 128, bytes l and l + 32 of its 64
    low-nibble bytes hold elements l, l + 32 (low nibbles) and l + 64, l + 96 (high ones);
    byte l of its 32 high-bit bytes holds the high pairs of l, l + 32, l + 64, l + 96."""
    raw = np.ascontiguousarray(blocks).reshape(rows, cols // 256, 210)
    ql = raw[..., :128].reshape(rows, cols // 256, 2, 2, 32)  # [half][bytes l / l + 32][l]
    qh = raw[..., 128:192].reshape(rows, cols // 256, 2, 1, 32)
    low = np.stack([ql & 15, ql >> 4], axis=3)  # [half][nibble][l or l + 32][l]
    low = low.reshape(rows, cols // 256, 2, 4, 32)  # element 32 * i + l of the half, i = 0..3
    high = qh >> (2 * np.arange(4, dtype=np.uint8))[:, None] & 3
    codes = ((low | (high << 4)).astype(np.int16) - 32).astype(np.int8).reshape(rows, cols)
    sc = raw[..., 192:208].copy().view(np.int8).astype(np.float32)
    scale = (_halves(raw, 208)[..., None] * sc).reshape(rows, cols // 16)
    return QuantizedTensor("int8", torch.from_numpy(codes), torch.from_numpy(scale))


def from_gguf_q5(blocks: np.ndarray, kind_name: str, rows: int, cols: int) -> QuantizedTensor:
    """A GGUF Q5_0 / Q5_1 tensor as int8 groups, its own codes: a block of 32 is f16 d (Q5_1:
    and f16 m), 4 bytes whose bit e is the fifth bit of element e, and 16 bytes of low nibbles
    (elements e and e + 16 in byte e); Q5_0: w = (q - 16) * d, Q5_1: w = q * d + m."""
    head = 2 if kind_name == "Q5_0" else 4
    raw = np.ascontiguousarray(blocks).reshape(rows, cols // GROUP, head + 4 + GROUP // 2)
    fifth = raw[..., head : head + 4, None] >> np.arange(8, dtype=np.uint8) & 1
    qs = raw[..., head + 4 :]
    low = np.concatenate([qs & 15, qs >> 4], axis=-1)
    codes = (low | (fifth.reshape(rows, cols // GROUP, GROUP) << 4)).astype(np.int8)
    zero = None
    if head == 2:
        codes -= 16
    else:
        zero = torch.from_numpy(_halves(raw, 2))
    q = torch.from_numpy(codes.reshape(rows, cols))
    return QuantizedTensor("int8", q, torch.from_numpy(_halves(raw, 0)), zero)


def from_gguf_q8_0(blocks: np.ndarray, rows: int, cols: int) -> QuantizedTensor:
    """A GGUF Q8_0 tensor (blocks of f16 d and 32 int8 codes) as int8 groups, exactly."""
    raw = np.ascontiguousarray(blocks).reshape(rows, cols // GROUP, 2 + GROUP)
    q = raw[..., 2:].copy().view(np.int8).reshape(rows, cols)
    return QuantizedTensor("int8", torch.from_numpy(q), torch.from_numpy(_halves(raw, 0)))


# GGUF tensor types whose blocks map exactly onto our groups of 32, and the kind they become.
# Q4_K_M files hold Q6_K for the output, half the layers' attn_v and ffn_down; Q5_K_M files
# Q5_K and Q6_K; both fall back to Q5_0 / Q5_1 for rows that are not a multiple of 256.
EXACT_TYPES = {
    "Q4_0": "int4",
    "Q4_1": "int4",
    "Q4_K": "int4",
    "Q5_0": "int8",
    "Q5_1": "int8",
    "Q5_K": "int8",
    "Q6_K": "int8",
    "Q8_0": "int8",
}
# Types of more than 4 bits a weight that do not map exactly: in a 4-bit file they become int8
# groups of 32 (symmetric, so a value moves by at most 1/254 of its group's largest
# magnitude), not int4.
FINER_TYPES = ("Q8_1", "Q8_K", "F16", "BF16", "F32")


def from_gguf_blocks(blocks: np.ndarray, kind_name: str, rows: int, cols: int) -> QuantizedTensor:
    """A tensor of one of EXACT_TYPES (raw bytes, a row of blocks per weight row)."""
    parse = {
        "Q4_K": from_gguf_q4_k,
        "Q5_K": from_gguf_q5_k,
        "Q6_K": from_gguf_q6_k,
        "Q8_0": from_gguf_q8_0,
    }.get(kind_name)
    if parse is not None:
        return parse(blocks, rows, cols)
    by_bits = from_gguf_q5 if kind_name in ("Q5_0", "Q5_1") else from_gguf_q4
    return by_bits(blocks, kind_name, rows, cols)


def read_gguf_weights(gguf_path: str, kind: str, keep_precision: bool = False):
    """Yield (Hugging Face name, weight) straight from a GGUF file: a QuantizedTensor of the
    file's own codes for each matrix of EXACT_TYPES, else a float32 tensor. An int8 layer
    widens int4 codes exactly; an int4 layer rounds int8 codes to int4 unless they are
    `finer` (runtime/model/layers.py). With `keep_precision` (--quantization auto) an int4
    model keeps the precision of matrices of more bits: Q5_K, Q6_K and Q8_0 codes come marked
    `finer`, and so does every float part (as int8 groups of its values) of a layer holding
    one of those or a FINER_TYPES matrix, so that each value of such a layer is rounded at
    most once, to int8 (its 4-bit codes widen to int8 exactly)."""
    from runtime.model.gguf_convert import GGUFBlocks, hf_name, iter_gguf_weights, open_gguf

    reader, config, arch = open_gguf(gguf_path)
    finer = keep_precision and kind == "int4"
    keep = tuple(EXACT_TYPES)
    finer_layers = set()
    if finer:  # the layers (q|k|v and gate|up merged) that run int8
        for t in reader.tensors:
            name = hf_name(t.name)
            kind_name = t.tensor_type.name
            wider = EXACT_TYPES.get(kind_name) == "int8" or kind_name in FINER_TYPES
            if name and len(t.shape) == 2 and wider:
                finer_layers.add(merged_layer(name))
    for name, weight in iter_gguf_weights(reader, config, arch, keep):
        if isinstance(weight, GGUFBlocks):
            w = _from_blocks(weight)
            w.finer = finer and w.kind == "int8"
            yield name, w
            continue
        tensor = torch.from_numpy(weight if weight.flags.writeable else weight.copy())
        if tensor.dim() == 2 and merged_layer(name) in finer_layers:  # its values, once
            tensor = quantize(tensor, "int8")
            tensor.finer = True
        yield name, tensor


def merged_layer(name: str) -> str:
    """The layer a Hugging Face weight loads into: q, k and v, and gate and up, share one."""
    for part, (layer, _) in MERGED_PROJECTIONS.items():
        name = name.replace(f".{part}.", f".{layer}.")
    return name


def _from_blocks(blocks) -> QuantizedTensor:
    from runtime.model.gguf_convert import unpermute_rotary

    w = from_gguf_blocks(blocks.data, blocks.type_name, blocks.rows, blocks.cols)
    if blocks.heads is None:
        return w

    def rows(x: torch.Tensor | None) -> torch.Tensor | None:
        # rows move whole, so their codes, scales and minimums follow them
        if x is None:
            return None
        return torch.from_numpy(np.ascontiguousarray(unpermute_rotary(x.numpy(), blocks.heads)))

    return QuantizedTensor(w.kind, rows(w.q), rows(w.scale), rows(w.zero))


def concat_rows(parts: list[QuantizedTensor]) -> QuantizedTensor:
    if any(p.kind == "int8" for p in parts):
        parts = in_one_form(parts)

    def cat(name):
        return torch.cat([getattr(p, name) for p in parts])

    return QuantizedTensor(
        parts[0].kind, cat("q"), cat("scale"), None if parts[0].zero is None else cat("zero")
    )


class QuantizedMatmul:
    """x @ W.T for a QuantizedTensor W: our AVX2 kernels (runtime/model/qgemv.c) on the codes
    themselves where they build, else torch's weight-only kernels; a dense GEMM over the
    dequantized weight for more than `kernel_rows` rows."""

    def __init__(self, w: QuantizedTensor):
        self.w = w
        lib = qgemv.load()
        self.native = qgemv.NativeMatmul(lib, w) if lib is not None else None
        self.kernel_rows = NATIVE_ROWS if self.native else _KERNEL_ROWS[w.kind]
        # bf16 tiles (tile_kind) run the products of more than TILE_CODE_ROWS rows; made on
        # first use (the model runner asks for them once loaded, after
        # --enable-deterministic-inference has turned use_tiles off, so that setting never
        # holds them, and a first batch does not wait ~0.1 s for the LM head's)
        self.use_tiles = bool(tile_kind()) and w.rows % 16 == 0 and w.cols % 32 == 0
        self.tiles: torch.Tensor | None = None
        if self.native is not None:
            self.packed = self.scales = None
        elif w.kind == "int8":  # torch's int8 kernel has no groups: a bf16 copy
            self.packed, self.scales = w.dequantize(torch.bfloat16), None
        else:
            self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                unpack_int4(w.q).to(torch.int32), 1
            )
            self.scales = torch.stack([w.scale.T, w.zero.T], dim=-1).to(torch.bfloat16).contiguous()

    def bf16_tiles(self) -> torch.Tensor | None:
        """The bf16 weight as tiles (made on first use), or None where they do not run."""
        if not self.use_tiles:
            return None
        if self.tiles is None:
            self.tiles = qgemv.bf16_tiles(self.w.dequantize(torch.bfloat16))
        return self.tiles

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        tiles = self.bf16_tiles() if x.shape[0] > TILE_CODE_ROWS else None
        if tiles is not None:
            y = qgemv.tiles_linear(tiles, x).to(x.dtype)
            return y if bias is None else y + bias
        if x.shape[0] > self.kernel_rows:
            w = self.native.dequantize() if self.native else self.w.dequantize()
            return F.linear(x, w.to(x.dtype), bias)
        if self.native is not None:
            y = self.native(x)
        elif self.w.kind == "int8":
            y = F.linear(x.to(torch.bfloat16), self.packed)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(
                x.to(torch.bfloat16), self.packed, GROUP, self.scales
            )
        y = y.to(x.dtype)
        return y if bias is None else y + bias

    def rows(self, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Dequantized rows of W (an embedding lookup)."""
        w = self.w
        picked = QuantizedTensor(
            w.kind, w.q[index], w.scale[index], None if w.zero is None else w.zero[index]
        )
        return picked.dequantize(dtype)

    def nbytes(self) -> int:
        """Bytes this weight holds (codes, scales and any kernel-specific copy)."""
        parts = [self.w.q, self.w.scale, self.w.zero, self.tiles]
        if self.native is None:
            parts += [self.packed, self.scales]
        elif self.w.kind == "int4":  # int8's m is w.zero itself
            parts += [self.native.m]
        return sum(t.numel() * t.element_size() for t in parts if t is not None)
