"""A whole decode step of a quantized Llama-family decoder in one native call (qgemv.c
`decode_step`).

At batch 1 the per-layer work between the weight reads (about a dozen calls and their tensor
bookkeeping per layer, thirty layers) cost as much as the reads themselves; this runs every
layer of an all-decode batch in C instead, on the same kernels the layers use one by one, so
the two paths agree to float rounding (tests/runtime/model/test_decode_step.py).

It applies when every linear layer runs on the native int4/int8 kernels, activations are
float32 and the KV pool float32 or bf16 on the CPU, there is no q/k norm, and the batch has
at most `native_rows()` (runtime/model/quantization.py) decode rows; `NativeDecodeStep.for_model`
returns None otherwise. Where a layer keeps bf16 tiles, batches of more than TILE_CODE_ROWS rows
run its products on them.
"""

from __future__ import annotations

import ctypes

import torch

from runtime.model import qgemv
from runtime.model.quantization import TILE_CODE_ROWS


class _Linear(ctypes.Structure):
    _fields_ = [
        ("bits", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("q", ctypes.c_void_p),
        ("d", ctypes.c_void_p),
        ("m", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("tiles", ctypes.c_void_p),
        ("split", ctypes.c_int64),
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("in_norm", ctypes.c_void_p),
        ("post_norm", ctypes.c_void_p),
        ("qkv", _Linear),
        ("o", _Linear),
        ("gate_up", _Linear),
        ("down", _Linear),
        ("k_pool", ctypes.c_void_p),
        ("v_pool", ctypes.c_void_p),
    ]


class _Model(ctypes.Structure):
    _fields_ = [
        ("layers", ctypes.c_int64),
        ("hidden", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("dim", ctypes.c_int64),
        ("inter", ctypes.c_int64),
        ("pool_slots", ctypes.c_int64),
        ("tile_rows", ctypes.c_int64),
        ("kv_bf16", ctypes.c_int64),
        ("eps", ctypes.c_float),
        ("cos", ctypes.c_void_p),
        ("sin", ctypes.c_void_p),
        ("final_norm", ctypes.c_void_p),
        ("layer", ctypes.POINTER(_Layer)),
    ]


def _linear(module) -> _Linear | None:
    native = module.matmul.native if module.matmul is not None else None
    if native is None or (module.bias is not None and module.bias.dtype != torch.float32):
        return None
    bias = module.bias.data_ptr() if module.bias is not None else None
    bits = 4 if native.kind == "int4" else 8
    m = native.m.data_ptr() if native.m is not None else None
    tiles = module.matmul.bf16_tiles()
    tiles = tiles.data_ptr() if tiles is not None else None
    q, scale = native.q.data_ptr(), native.scale.data_ptr()
    return _Linear(bits, native.n, native.k, q, scale, m, bias, tiles, native.split)


def _is_cpu(*tensors: torch.Tensor, dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> bool:
    """Contiguous CPU tensors of one of `dtypes` (float32 unless said)."""
    return all(t.dtype in dtypes and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


class NativeDecodeStep:
    """Runs every decoder layer and the final norm of an all-decode batch in one call."""

    def __init__(self, lib: ctypes.CDLL, model: _Model, layers: ctypes.Array):
        self.lib, self.model, self._layers = lib, model, layers  # _layers: keeps them alive

    @classmethod
    def for_model(cls, model, kv_pool) -> NativeDecodeStep | None:
        """The step for a LlamaForCausalLM and its KV pool, or None where it does not apply."""
        lib = qgemv.load()
        cfg = model.config
        if lib is None or cfg.qk_norm or cfg.head_dim % 8 or model.quantization is None:
            return None
        if model.tp is not None:  # the step has no collectives
            return None
        pools = kv_pool.k_heads + kv_pool.v_heads
        if not _is_cpu(model.norm.weight, model.rotary.cos):
            return None
        if not _is_cpu(*pools, dtypes=qgemv.NATIVE_KV_DTYPES):
            return None
        layers = (_Layer * len(model.layers))()
        for i, layer in enumerate(model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            linears = [_linear(m) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj)]
            linears.append(_linear(mlp.down_proj))
            norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
            if any(w is None for w in linears) or not _is_cpu(*norms):
                return None
            layers[i] = _Layer(
                norms[0].data_ptr(),
                norms[1].data_ptr(),
                *linears,
                kv_pool.k_heads[i].data_ptr(),
                kv_pool.v_heads[i].data_ptr(),
            )
        spec = _Model(
            len(model.layers),
            cfg.hidden_size,
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
            cfg.intermediate_size,
            kv_pool.k_heads[0].shape[1],
            TILE_CODE_ROWS,
            qgemv.kv_bf16(kv_pool.k_heads[0]),
            cfg.rms_norm_eps,
            model.rotary.cos.data_ptr(),
            model.rotary.sin.data_ptr(),
            model.norm.weight.data_ptr(),
            layers,
        )
        return cls(lib, spec, layers)

    def __call__(
        self,
        h: torch.Tensor,
        positions: torch.Tensor,
        out_loc: torch.Tensor,
        slots: torch.Tensor,
        lens: torch.Tensor,
    ) -> torch.Tensor:
        """h: the embedded tokens [rows, hidden] float32, updated in place to the final normed
        hidden states; slots [rows, Lmax] and lens [rows] as the decode attention takes them."""
        ints = [t.to(torch.int64).contiguous() for t in (positions, out_loc, slots, lens)]
        h = h.contiguous()
        self.lib.decode_step(
            ctypes.addressof(self.model),
            h.data_ptr(),
            h.shape[0],
            ints[0].data_ptr(),
            ints[1].data_ptr(),
            ints[2].data_ptr(),
            ints[2].shape[1],
            ints[3].data_ptr(),
            torch.get_num_threads(),
        )
        return h
