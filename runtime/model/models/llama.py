"""Llama-family decoder (llama, mistral, qwen2, qwen3) over ragged batches and the KV pool."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from runtime.model.attention.base import AttentionBackend, ForwardBatch
from runtime.model.config import ModelConfig
from runtime.model.layers import (
    ColumnParallelLinear,
    RMSNorm,
    RotaryEmbedding,
    RowParallelLinear,
    apply_rotary,
)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.layer_id = layer_id
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.split = [q_size, kv_size, kv_size]
        self.qkv_proj = ColumnParallelLinear(cfg.hidden_size, self.split, bias=cfg.qkv_bias)
        self.o_proj = RowParallelLinear(q_size, cfg.hidden_size, bias=cfg.o_bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos_sin, backend: AttentionBackend, batch: ForwardBatch):
        n = x.shape[0]
        q, k, v = self.qkv_proj(x).split(self.split, dim=-1)
        q = q.view(n, self.num_heads, self.head_dim)
        k = k.view(n, self.num_kv_heads, self.head_dim)
        v = v.view(n, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, k, cos_sin)
        return self.o_proj(backend.forward(q, k, v, self.layer_id, batch))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.inter = cfg.intermediate_size
        self.gate_up_proj = ColumnParallelLinear(cfg.hidden_size, [self.inter] * 2, bias=False)
        self.down_proj = RowParallelLinear(self.inter, cfg.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.self_attn = Attention(cfg, layer_id)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, cos_sin, backend, batch):
        h = h + self.self_attn(self.input_layernorm(h), cos_sin, backend, batch)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaForCausalLM(nn.Module):
    """Decoder whose forward maps a ForwardBatch to final hidden states, one row per token."""

    def __init__(self, cfg: ModelConfig, max_positions: int):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(cfg.head_dim, max_positions, cfg.rope)
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        )

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, backend: AttentionBackend) -> torch.Tensor:
        h = self.embed_tokens(batch.input_ids)
        cos_sin = self.rotary.table(batch.positions, h.dtype)
        for layer in self.layers:
            h = layer(h, cos_sin, backend, batch)
        return self.norm(h)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors into this model's (merged, sharded) parameters."""
        qkv = {"q_proj": 0, "k_proj": 1, "v_proj": 2}
        gate_up = {"gate_proj": 0, "up_proj": 1}
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
                self.lm_head.weight.data.copy_(tensor)
            else:
                self.get_parameter(name.removeprefix("model.")).data.copy_(tensor)
            seen.add(name)
        if not any(n.startswith("model.embed_tokens") for n in seen):
            raise ValueError("checkpoint has no model.embed_tokens.weight")


def _local(parts: list[str]) -> str:
    # "model.layers.3.input_layernorm.weight" -> "layers.3.input_layernorm.weight"
    return ".".join(parts[1:])
