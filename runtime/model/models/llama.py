"""Llama-family decoder (llama, mistral, qwen2, qwen3) over ragged batches and the KV pool."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from runtime.model import layers, qgemv
from runtime.model.attention.base import AttentionBackend, ForwardBatch
from runtime.model.config import MERGED_PROJECTIONS, ModelConfig
from runtime.model.decode_step import NativeDecodeStep
from runtime.model.layers import (
    ColumnParallelLinear,
    RMSNorm,
    RotaryBatch,
    RotaryEmbedding,
    RowParallelLinear,
)
from runtime.model.parallel import TensorParallel, head_shard
from runtime.model.quantization import native_rows


class Attention(nn.Module):
    """Self-attention over this rank's q heads and the KV heads they read (all of them
    without tensor parallelism)."""

    def __init__(self, cfg: ModelConfig, layer_id: int, quantization=None, tp=None):
        super().__init__()
        rank, size = (tp.rank, tp.size) if tp is not None else (0, 1)
        self.layer_id = layer_id
        d = self.head_dim = cfg.head_dim
        shard = head_shard(cfg, rank, size)
        self.num_heads, self.num_kv_heads = shard.q_heads, shard.kv_heads
        q_size, kv_size = self.num_heads * d, self.num_kv_heads * d
        self.split = [q_size, kv_size, kv_size]
        kv_rows = (shard.kv_start * d, kv_size)
        self.qkv_proj = ColumnParallelLinear(
            cfg.hidden_size,
            [cfg.num_heads * d, cfg.num_kv_heads * d, cfg.num_kv_heads * d],
            bias=cfg.qkv_bias,
            tp=tp,
            quantization=quantization,
            shards=[(shard.q_start * d, q_size), kv_rows, kv_rows],
        )
        self.o_proj = RowParallelLinear(
            cfg.num_heads * d,
            cfg.hidden_size,
            bias=cfg.o_bias,
            tp=tp,
            quantization=quantization,
            shard=(shard.q_start * d, q_size),
        )
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x, rope: RotaryBatch, backend: AttentionBackend, batch: ForwardBatch):
        n = x.shape[0]
        qkv = self.qkv_proj(x)
        rotated = self.q_norm is None and rope.rotate_qkv_inplace(
            qkv, self.num_heads, self.num_kv_heads, self.head_dim
        )
        q, k, v = qkv.split(self.split, dim=-1)
        q = q.view(n, self.num_heads, self.head_dim)
        k = k.view(n, self.num_kv_heads, self.head_dim)
        v = v.view(n, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if not rotated:
            q, k = rope.apply(q, k)
        return self.o_proj(backend.forward(q, k, v, self.layer_id, batch))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, quantization: str | None = None, tp=None):
        super().__init__()
        self.inter = cfg.intermediate_size
        self.gate_up_proj = ColumnParallelLinear(
            cfg.hidden_size, [self.inter] * 2, bias=False, tp=tp, quantization=quantization
        )
        self.down_proj = RowParallelLinear(
            self.inter, cfg.hidden_size, bias=False, tp=tp, quantization=quantization
        )

    def forward(self, x):
        gate_up = self.gate_up_proj(x)
        act = qgemv.silu_mul(gate_up)  # one native call on float32 CPU rows
        if act is None and layers.fused_kernels(gate_up):
            from kernels import silu_mul

            act = silu_mul(gate_up)  # one launch
        if act is None:
            gate, up = gate_up.chunk(2, dim=-1)
            act = F.silu(gate) * up
        return self.down_proj(act)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, quantization=None, tp=None):
        super().__init__()
        self.self_attn = Attention(cfg, layer_id, quantization, tp)
        self.mlp = MLP(cfg, quantization, tp)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, rope, backend, batch):
        attn = self.self_attn(self.input_layernorm(h), rope, backend, batch)
        if layers.fused_kernels(h):  # the residual add in the norm's launch, h in place
            x = self.post_attention_layernorm(attn, residual=h)
        else:
            h = h + attn
            x = self.post_attention_layernorm(h)
        return h + self.mlp(x)


class LlamaForCausalLM(nn.Module):
    """Decoder whose forward maps a ForwardBatch to final hidden states, one row per token.

    With `quantization` ("int8" / "int4") the decoder layers keep weights of that kind and the
    embedding (and the LM head, tied or not) int8 rows, as llama.cpp's Q4 files keep theirs at
    8 bits: it is the largest matrix and the one every logit depends on.

    With `tp` (tensor parallelism) every rank holds its share of the heads, the MLP columns and
    the vocabulary (embedding and LM head rows); compute_logits returns the whole vocabulary's
    logits on rank 0 and None on the others."""

    def __init__(
        self,
        cfg: ModelConfig,
        max_positions: int,
        quantization: str | None = None,
        tp: TensorParallel | None = None,
    ):
        super().__init__()
        self.config = cfg
        self.quantization = quantization
        self.tp = tp if tp is not None and tp.enabled else None
        vocab = dict(bias=False, tp=tp, quantization=quantization and "int8")
        self.embed_tokens = ColumnParallelLinear(cfg.hidden_size, [cfg.vocab_size], **vocab)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, i, quantization, tp) for i in range(cfg.num_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(cfg.head_dim, max_positions, cfg.rope)
        self._step_pool, self._step = None, None  # see _native_step
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else ColumnParallelLinear(cfg.hidden_size, [cfg.vocab_size], **vocab)
        )

    def _embed(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if self.embed_tokens.matmul is not None:
            return self.embed_tokens.matmul.rows(ids, dtype)
        if self.tp is None:
            return F.embedding(ids, self.embed_tokens.weight)
        start, rows = self.embed_tokens.shards[0]  # this rank's vocabulary rows
        local = ids - start
        outside = (local < 0) | (local >= rows)
        h = F.embedding(local.masked_fill(outside, 0), self.embed_tokens.weight)
        return self.tp.all_reduce(h.masked_fill_(outside[:, None], 0))

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, backend: AttentionBackend) -> torch.Tensor:
        h = self._embed(batch.input_ids, self.norm.weight.dtype)
        decode = backend.decode_slots(batch) if batch.num_tokens <= native_rows() else None
        if decode is not None and self._native_step(backend) is not None:
            return self._step(h, batch.positions, batch.out_cache_loc, *decode)
        rope = self.rotary.for_batch(batch.positions, h.dtype)
        for layer in self.layers:
            h = layer(h, rope, backend, batch)
        return self.norm(h)

    def _native_step(self, backend: AttentionBackend) -> NativeDecodeStep | None:
        """The whole-step kernel for this backend's KV pool, built on first use (None: the
        layers run one by one)."""
        pool = backend.kv_pool
        if self._step_pool is not pool:
            self._step_pool, self._step = pool, NativeDecodeStep.for_model(self, pool)
        return self._step

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        if self.tp is None:
            return head(hidden).float()
        return self.tp.gather_columns(head(hidden).float(), self.config.vocab_size)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors into this model's (merged, sharded) parameters."""
        qkv = {p: i for p, (m, i) in MERGED_PROJECTIONS.items() if m == "qkv_proj"}
        gate_up = {p: i for p, (m, i) in MERGED_PROJECTIONS.items() if m == "gate_up_proj"}
        seen = set()
        for name, tensor in weights:
            if "rotary_emb" in name:
                continue
            if name == "lm_head.weight" and self.lm_head is None:
                continue  # tied embeddings
            parts = name.split(".")
            is_bias = parts[-1] == "bias"
            if name.startswith("model.layers."):
                layer = self.layers[int(parts[2])]
                module, proj = parts[3], parts[4]
                if module == "self_attn" and proj in qkv:
                    layer.self_attn.qkv_proj.load(qkv[proj], tensor, is_bias)
                elif module == "self_attn" and proj == "o_proj":
                    layer.self_attn.o_proj.load(tensor, is_bias)
                elif module == "mlp" and proj in gate_up:
                    layer.mlp.gate_up_proj.load(gate_up[proj], tensor)
                elif module == "mlp" and proj == "down_proj":
                    layer.mlp.down_proj.load(tensor)
                else:
                    self.get_parameter(_local(parts)).data.copy_(tensor)
            elif name == "lm_head.weight":
                self.lm_head.load(0, tensor)
            elif name == "model.embed_tokens.weight":
                self.embed_tokens.load(0, tensor)
            else:
                self.get_parameter(name.removeprefix("model.")).data.copy_(tensor)
            seen.add(name)
        if not any(n.startswith("model.embed_tokens") for n in seen):
            raise ValueError("checkpoint has no model.embed_tokens.weight")


def _local(parts: list[str]) -> str:
    # "model.layers.3.input_layernorm.weight" -> "layers.3.input_layernorm.weight"
    return ".".join(parts[1:])
