"""Building blocks of the decoder: sharded linear layers, RMSNorm and rotary embeddings.

Linear layers hold one tensor-parallel shard (rank `tp_rank` of `tp_size`) and know how to cut
that shard out of a full checkpoint tensor; with tp_size=1 they hold everything.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from runtime.model.config import RopeConfig


class ColumnParallelLinear(nn.Module):
    """y = x @ W.T where W stacks several output blocks (q|k|v, gate|up), each split by rank."""

    def __init__(
        self,
        in_features: int,
        out_blocks: list[int],
        bias: bool,
        tp_rank: int = 0,
        tp_size: int = 1,
    ):
        super().__init__()
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.shard_sizes = [b // tp_size for b in out_blocks]
        self.offsets = [sum(self.shard_sizes[:i]) for i in range(len(out_blocks))]
        self.weight = nn.Parameter(
            torch.empty(sum(self.shard_sizes), in_features), requires_grad=False
        )
        self.bias = (
            nn.Parameter(torch.zeros(sum(self.shard_sizes)), requires_grad=False) if bias else None
        )

    def load(self, block: int, full: torch.Tensor, is_bias: bool = False) -> None:
        rows = self.shard_sizes[block]
        shard = full.narrow(0, self.tp_rank * rows, rows)
        target = self.bias if is_bias else self.weight
        target.data.narrow(0, self.offsets[block], rows).copy_(shard)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = x @ W.T with W split along its input dimension; ranks would all-reduce their sums."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool, tp_rank: int = 0, tp_size: int = 1
    ):
        super().__init__()
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.in_shard = in_features // tp_size
        self.weight = nn.Parameter(torch.empty(out_features, self.in_shard), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None

    def load(self, full: torch.Tensor, is_bias: bool = False) -> None:
        if is_bias:
            self.bias.data.copy_(full)
        else:
            self.weight.data.copy_(full.narrow(1, self.tp_rank * self.in_shard, self.in_shard))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
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


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]):
    cos, sin = cos_sin
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)
