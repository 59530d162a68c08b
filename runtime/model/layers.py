"""Building blocks of the decoder: sharded linear layers, RMSNorm and rotary embeddings.

Linear layers hold one tensor-parallel shard (of the ranks of `tp`, runtime/model/parallel.py)
and know how to cut that shard out of a full checkpoint tensor; without `tp` they hold
everything. Built with
`quantization` ("int8" or "int4"), they keep their weight quantized instead
(runtime/model/quantization.py): each checkpoint block is quantized as it loads (or arrives
quantized from a GGUF file) and no float copy of the weight is ever held.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from runtime.model import qgemv
from runtime.model.config import RopeConfig
from runtime.model.parallel import TensorParallel
from runtime.model.quantization import (
    QuantizationError,
    QuantizedMatmul,
    QuantizedTensor,
    concat_rows,
    quantize,
)


class _QuantizedBlocks:
    """The quantized blocks of one linear layer, gathered as they load, then one matmul."""

    def __init__(self, kind: str, n_blocks: int, tp_size: int):
        if tp_size != 1:
            raise QuantizationError("quantized weights do not support tensor parallelism yet")
        self.kind, self.parts, self.matmul = kind, [None] * n_blocks, None

    def load(self, block: int, full, rows: int, start: int) -> QuantizedMatmul | None:
        """Store block `block` (a float tensor or a QuantizedTensor); the matmul once all are in.
        int8 codes in an int4 layer (a file's Q8_0 matrix) are rounded to int4, except codes
        marked `finer`: the whole layer then runs int8, so a 6-bit v or down projection beside
        4-bit ones keeps its bits. int4 codes in an int8 layer widen to int8 exactly."""
        if isinstance(full, QuantizedTensor):
            if full.kind == "int8" and full.finer and self.kind == "int4":
                self.kind = "int8"
            if full.rows != rows:
                full = full.narrow_rows(start, rows)
        else:
            full = quantize(full.narrow(0, start, rows), self.kind)
        self.parts[block] = full
        if all(p is not None for p in self.parts):
            parts = [
                p
                if p.kind == self.kind or self.kind == "int8"
                else quantize(p.dequantize(), "int4")
                for p in self.parts
            ]  # concat_rows widens int4 parts of an int8 layer
            self.matmul = QuantizedMatmul(concat_rows(parts))
            self.parts = []
        return self.matmul


def _weight(rows: int, cols: int, quantization: str | None) -> nn.Parameter | None:
    return None if quantization else nn.Parameter(torch.empty(rows, cols), requires_grad=False)


class ColumnParallelLinear(nn.Module):
    """y = x @ W.T where W stacks several output blocks (q|k|v, gate|up), each split by rank.

    `shards` gives each block's (first row, rows) on this rank; by default block b is cut in
    tp_size equal parts, rounded up (the last rank's tail, past the checkpoint's rows, is zero:
    a vocabulary that does not split evenly)."""

    def __init__(
        self,
        in_features: int,
        out_blocks: list[int],
        bias: bool,
        tp: TensorParallel | None = None,
        quantization: str | None = None,
        shards: list[tuple[int, int]] | None = None,
    ):
        super().__init__()
        rank, size = (tp.rank, tp.size) if tp is not None else (0, 1)
        if shards is None:
            shards = [(rank * -(-b // size), -(-b // size)) for b in out_blocks]
        self.shards = shards
        self.shard_sizes = [rows for _, rows in shards]
        self.offsets = [sum(self.shard_sizes[:i]) for i in range(len(out_blocks))]
        self.weight = _weight(sum(self.shard_sizes), in_features, quantization)
        self.quantized = (
            _QuantizedBlocks(quantization, len(out_blocks), size) if quantization else None
        )
        self.matmul = None
        self.bias = (
            nn.Parameter(torch.zeros(sum(self.shard_sizes)), requires_grad=False) if bias else None
        )

    def load(self, block: int, full, is_bias: bool = False) -> None:
        start, rows = self.shards[block]
        if self.quantized is not None and not is_bias:
            self.matmul = self.quantized.load(block, full, rows, start)
            return
        target = (self.bias if is_bias else self.weight).data.narrow(0, self.offsets[block], rows)
        have = max(0, min(rows, full.shape[0] - start))
        target[:have].copy_(full.narrow(0, start, have))
        target[have:].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.matmul is not None:
            return self.matmul(x, self.bias)
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = x @ W.T with W split along its input dimension; the ranks' sums are all-reduced,
    then the bias added once."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool,
        tp: TensorParallel | None = None,
        quantization: str | None = None,
        shard: tuple[int, int] | None = None,
    ):
        """`shard`: this rank's (first input column, columns); by default an equal part."""
        super().__init__()
        self.tp = tp if tp is not None and tp.enabled else None
        rank, size = (tp.rank, tp.size) if tp is not None else (0, 1)
        if shard is None:
            shard = (rank * (in_features // size), in_features // size)
        self.in_start, self.in_shard = shard
        self.out_features = out_features
        self.weight = _weight(out_features, self.in_shard, quantization)
        self.quantized = _QuantizedBlocks(quantization, 1, size) if quantization else None
        self.matmul = None
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None

    def load(self, full, is_bias: bool = False) -> None:
        if is_bias:
            self.bias.data.copy_(full)
        elif self.quantized is not None:
            self.matmul = self.quantized.load(0, full, self.out_features, 0)
        else:
            self.weight.data.copy_(full.narrow(1, self.in_start, self.in_shard))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp is not None:
            out = self.tp.all_reduce(F.linear(x, self.weight))
            return out if self.bias is None else out + self.bias
        if self.matmul is not None:
            return self.matmul(x, self.bias)
        return F.linear(x, self.weight, self.bias)


def fused_kernels(x: torch.Tensor) -> bool:
    """Whether the elementwise steps of a layer on x run as kernels.fused_ops launches (one
    each, where torch takes several): on CUDA, for the rows ([T, D], unit column stride) of
    the residual stream, the fused qkv and gate/up projections."""
    return x.is_cuda and x.dim() == 2 and x.stride(-1) == 1


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The normalised rows of x; with `residual` (where fused_kernels(x) holds), of
        residual + x, which is written into residual."""
        if fused_kernels(x):
            from kernels import rms_norm

            return rms_norm(x, self.weight, self.eps, residual)
        if residual is not None:
            raise ValueError("a residual add is fused into the norm only where fused_kernels")
        if x.dtype == torch.float32:
            out = qgemv.rms_norm(x, self.weight, self.eps)  # one call: ~15x faster on a row
            return out if out is not None else F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Normalise in fp32 like the reference implementation, then scale in the model dtype.
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)
        return self.weight * normed


def rope_inv_freq(rope: RopeConfig, rotary_dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (
        rope.theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    )
    if rope.rope_type == "linear":
        inv_freq = inv_freq / rope.factor
    elif rope.rope_type == "llama3":
        # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between blended.
        old_len = rope.original_max_position_embeddings
        low_wavelen = old_len / rope.low_freq_factor
        high_wavelen = old_len / rope.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq)
        smooth = (old_len / wavelen - rope.low_freq_factor) / (
            rope.high_freq_factor - rope.low_freq_factor
        )
        blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
        in_band = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = torch.where(in_band, blended, scaled)
    return inv_freq.float()


class RotaryEmbedding(nn.Module):
    """Rotary position embedding in the half-split layout, with a cos/sin table per position."""

    def __init__(self, head_dim: int, max_positions: int, rope: RopeConfig):
        super().__init__()
        inv_freq = rope_inv_freq(rope, head_dim)
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def table(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for these positions, [T, 1, head_dim]; computed once per forward."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(
            dtype
        )

    def for_batch(self, positions: torch.Tensor, dtype: torch.dtype) -> RotaryBatch:
        return RotaryBatch(self, positions, dtype)


class RotaryBatch:
    """The rotary embedding of one forward's positions, shared by every layer."""

    def __init__(self, emb: RotaryEmbedding, positions: torch.Tensor, dtype: torch.dtype):
        self.emb, self.positions, self.dtype = emb, positions, dtype
        self._table = None

    def rotate_qkv_inplace(self, qkv: torch.Tensor, q_heads: int, kv_heads: int, dim: int) -> bool:
        """Rotate the q and k heads of a fused qkv projection in place (one launch on CUDA,
        one call each on float32 CPU rows); False, untouched, where neither applies."""
        cos, sin = self.emb.cos, self.emb.sin
        if fused_kernels(qkv):
            from kernels import rotary_qkv_inplace

            rotary_qkv_inplace(qkv, q_heads + kv_heads, dim, self.positions, cos, sin)
            return True
        if not qgemv.rotary_inplace(qkv, q_heads, dim, self.positions, cos, sin):
            return False
        return qgemv.rotary_inplace(
            qkv[:, q_heads * dim :], kv_heads, dim, self.positions, cos, sin
        )

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._table is None:
            self._table = self.emb.table(self.positions, self.dtype)
        return apply_rotary(q, k, self._table)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]):
    cos, sin = cos_sin
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)
