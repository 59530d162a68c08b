"""K-quant GGUF files end to end: SmolLM2's file with matrices re-encoded as llama.cpp's
Q4_K_M and Q5_K_M files hold them (Q6_K, Q5_K, Q4_K, their fallbacks Q5_0 / Q5_1, Q4_0 and
Q8_0), run with --quantization auto against the same file dequantized to float32."""

import shutil
from pathlib import Path

import pytest
import torch

from runtime.model import qgemv
from runtime.model.loader import alias_gguf_path, load_tokenizer, resolve_model_path
from runtime.model.quantization import EXACT_TYPES
from tests.runtime.model.gguf_kquants import rewrite_gguf
from tests.runtime.model.test_model_executor import DirectRunner
from tests.runtime.model.test_quantization import _greedy, _perplexity

LAYERS = 30
# the GGUF matrices each linear layer of ours loads
PARTS = {
    "qkv": ("attn_q", "attn_k", "attn_v"),
    "o": ("attn_output",),
    "gate_up": ("ffn_gate", "ffn_up"),
    "down": ("ffn_down",),
}


def _mixed_types() -> dict[str, str]:
    """Every type beside the file's Q4_1 (an int4 model): K-quants need rows of a multiple of
    256 values, so only ffn_down (1,536 columns) takes them here; matrices of 576 columns
    take the fallbacks (Q5_0 / Q5_1, and Q4_0 for Q3_K)."""
    types = {}
    for layer in range(LAYERS):
        if layer % 2 == 0:  # 6 bits for half the v and down matrices
            types[f"blk.{layer}.attn_v.weight"] = "Q5_1"
            types[f"blk.{layer}.ffn_down.weight"] = "Q6_K"
        else:  # a 5-bit gate beside the file's Q4_1 up; 4-bit q and k of both kinds
            types[f"blk.{layer}.ffn_gate.weight"] = "Q5_0"
            types[f"blk.{layer}.ffn_down.weight"] = "Q5_K" if layer % 4 == 1 else "Q4_K"
            types[f"blk.{layer}.attn_q.weight"] = "Q4_0"
            types[f"blk.{layer}.attn_k.weight"] = "Q4_0"
    return types


def _q4_k_m_types() -> dict[str, str]:
    """The types llama.cpp's quantizer gives SmolLM2 for Q4_K_M (most matrices Q5_0, Q4_K's
    fallback; Q8_0 v and Q6_K down in 14 layers, Q4_K down in the others): an int8 model
    whose Q4_K layers keep their 4 bits."""
    more = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29}
    types = {}
    for layer in range(LAYERS):
        for name in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            types[f"blk.{layer}.{name}.weight"] = "Q5_0"
        types[f"blk.{layer}.attn_v.weight"] = "Q8_0" if layer in more else "Q5_0"
        types[f"blk.{layer}.ffn_down.weight"] = "Q6_K" if layer in more else "Q4_K"
    return types


def _expected(types: list[str]) -> tuple[str, bool]:
    """(kind, split) of a layer whose GGUF matrices have `types`: an int4 model runs int8 the
    layers holding more than 4 bits; an int8 model runs int4 the layers of 4 bits alone; scales
    per 16 where a part is Q6_K."""
    kinds = {EXACT_TYPES[t] for t in types}
    kind = "int8" if "int8" in kinds else "int4"
    return kind, "Q6_K" in types


@pytest.mark.skipif(qgemv.load() is None, reason="no AVX2 CPU or C compiler")
@pytest.mark.parametrize(
    "layout, model_kind", [(_mixed_types, "int4"), (_q4_k_m_types, "int8")], ids=["mixed", "q4_k_m"]
)
def test_a_k_quant_file_runs_on_its_own_values(
    layout, model_kind, tmp_path, monkeypatch, one_thread
):
    path = str(tmp_path / "smollm2-kquants.gguf")
    source = alias_gguf_path("smollm2")
    types = layout()
    rewrite_gguf(source, path, types)
    monkeypatch.setenv("RADIXGEN_CACHE", str(tmp_path / "cache"))  # the float copy: ~0.5 GB
    try:
        auto = DirectRunner(path, quantization="auto")
        dense = DirectRunner(path, quantization="none")
        assert auto.runner.quantization == model_kind
        layers_auto, layers_dense = auto.runner.model.layers, dense.runner.model.layers
        for n in range(LAYERS):
            a, d = layers_auto[n], layers_dense[n]
            linears = {
                "qkv": (a.self_attn.qkv_proj, d.self_attn.qkv_proj),
                "o": (a.self_attn.o_proj, d.self_attn.o_proj),
                "gate_up": (a.mlp.gate_up_proj, d.mlp.gate_up_proj),
                "down": (a.mlp.down_proj, d.mlp.down_proj),
            }
            for name, (ours, ref) in linears.items():
                parts = [types.get(f"blk.{n}.{p}.weight", "Q4_1") for p in PARTS[name]]
                w = ours.matmul.w
                assert (w.kind, w.split) == _expected(parts), (n, name, parts)
                # every value is the file's, as gguf dequantizes it
                assert torch.allclose(w.dequantize(), ref.weight, rtol=1e-6, atol=1e-6)

        # quality as the issue measures it (1,000 tokens, 3 prompts). mixed: 13.4411
        # against 13.4255, +0.12%, 72 of 72 greedy tokens the same; q4_k_m: see README
        text = (Path(__file__).parents[2] / "data" / "perplexity_text.txt").read_text()
        ids = load_tokenizer(resolve_model_path("smollm2"))(text)["input_ids"][:500]
        ppl_auto, ppl_dense = _perplexity(auto, ids, 16), _perplexity(dense, ids, 500)
        assert abs(ppl_auto / ppl_dense - 1) < 0.01, (ppl_auto, ppl_dense)
        prompts = [[1, 504, 3458, 282, 4649, 314], [1, 2896, 24099, 26, 94, 46, 11]]
        same = total = 0
        for n, prompt in enumerate(prompts):
            a, b = _greedy(auto, f"p{n}", prompt, 16), _greedy(dense, f"p{n}", prompt, 16)
            same += sum(x == y for x, y in zip(a, b))
            total += len(a)
        assert same >= total - 2, (same, total)
    finally:
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
