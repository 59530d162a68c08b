"""A K-quant GGUF file end to end: SmolLM2's file with matrices re-encoded as Q4_K_M and
Q5_K_M files hold them (Q6_K, Q5_K, Q4_K and their fallbacks Q5_0 / Q5_1 beside the file's
Q4_1 and Q8_0), run with --quantization auto against the same file dequantized to float32."""

import shutil
from pathlib import Path

import pytest
import torch

from runtime.model import qgemv
from runtime.model.loader import alias_gguf_path, load_tokenizer, resolve_model_path
from tests.runtime.model.gguf_kquants import rewrite_gguf
from tests.runtime.model.test_model_executor import DirectRunner
from tests.runtime.model.test_quantization import _greedy, _perplexity

LAYERS = 30


def _k_quant_types() -> dict[str, str]:
    """Types as llama.cpp's Q4_K_M and Q5_K_M give them: K-quants need rows of a multiple of
    256 values, so only ffn_down (1,536 columns) takes them here; matrices of 576 columns
    fall back to Q5_0 / Q5_1 (Q4_K's and Q5_K's fallbacks)."""
    types = {}
    for layer in range(LAYERS):
        if layer % 2 == 0:  # 6 bits for half the v and down matrices
            types[f"blk.{layer}.attn_v.weight"] = "Q5_1"
            types[f"blk.{layer}.ffn_down.weight"] = "Q6_K"
        else:  # a 5-bit gate beside the file's Q4_1 up
            types[f"blk.{layer}.ffn_gate.weight"] = "Q5_0"
            types[f"blk.{layer}.ffn_down.weight"] = "Q5_K" if layer % 4 == 1 else "Q4_K"
    return types


def _expected_kind(layer: int, name: str) -> tuple[str, bool]:
    """(kind, split) of a layer's linear: int8 where it holds a matrix of more than 4 bits,
    scales per 16 for Q6_K."""
    if layer % 2 == 0:
        return ("int8", name == "down") if name in ("qkv", "down") else ("int4", False)
    if name == "gate_up" or (name == "down" and layer % 4 == 1):
        return "int8", False
    return "int4", False


@pytest.mark.skipif(qgemv.load() is None, reason="no AVX2 CPU or C compiler")
def test_a_k_quant_file_runs_on_its_own_values(tmp_path, monkeypatch, one_thread):
    path = str(tmp_path / "smollm2-kquants.gguf")
    rewrite_gguf(alias_gguf_path("smollm2"), path, _k_quant_types())
    monkeypatch.setenv("RADIXGEN_CACHE", str(tmp_path / "cache"))  # the float copy: ~0.5 GB
    try:
        auto = DirectRunner(path, quantization="auto")
        dense = DirectRunner(path, quantization="none")
        assert auto.runner.quantization == "int4"
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
                w = ours.matmul.w
                assert (w.kind, w.split) == _expected_kind(n, name), (n, name)
                # every value is the file's, as gguf dequantizes it
                assert torch.allclose(w.dequantize(), ref.weight, rtol=1e-6, atol=1e-6)

        # quality as the issue measures it (1,000 tokens, 3 prompts: 13.4411 against
        # 13.4255, +0.12%, and 72 of 72 greedy tokens the same)
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
