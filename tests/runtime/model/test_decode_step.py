"""The one-call native decode step against the layers run one by one, on tiny random models of
each family, both weight kinds, and ragged batches of cached lengths."""

import pytest
import torch

from runtime.model import layers, qgemv
from runtime.model import quantization as quantization_module
from runtime.model.decode_step import NativeDecodeStep
from runtime.model.quantization import QuantizedTensor
from tests.runtime.conftest import TINY_VARIANTS, make_tiny_model
from tests.runtime.model.test_model_executor import DirectRunner

pytestmark = pytest.mark.skipif(qgemv.load() is None, reason="no AVX2 CPU or C compiler")

PROMPTS = {"a": [5, 6, 7], "b": [9, 10, 11, 12, 13, 14, 15, 16, 17], "c": [40, 41]}


def decode_logits(runner: DirectRunner, steps: int) -> list[torch.Tensor]:
    """Prefill every prompt, then `steps` greedy decode steps of the whole batch."""
    position, token = {}, {}
    for name, prompt in PROMPTS.items():
        (logits,) = runner.forward([(name, prompt, 0)])
        position[name], token[name] = len(prompt), int(logits[-1].argmax())
    out = []
    for _ in range(steps):
        logits = runner.forward([(n, [token[n]], position[n]) for n in PROMPTS])
        for name, row in zip(PROMPTS, logits):
            position[name], token[name] = position[name] + 1, int(row[-1].argmax())
        out.append(torch.cat(logits))
    return out


def _split_int8(w: torch.Tensor, kind: str) -> QuantizedTensor:
    """int8 codes as Q6_K / Q5_K matrices load (a scale per 16 values and a zero point per
    32): here each group's mean as its zero point, then symmetric halves."""
    rows = w.shape[0]
    groups = w.to(torch.float32).view(rows, -1, 32)
    zero = groups.mean(dim=2)
    halves = (groups - zero[..., None]).view(rows, -1, 16)
    scale = halves.abs().amax(dim=2).clamp(min=1e-12) / 127
    q = torch.round(halves / scale[..., None]).clamp(-127, 127).to(torch.int8)
    return QuantizedTensor("int8", q.view(w.shape), scale, zero)


@pytest.mark.parametrize("tiles", [False, True])
@pytest.mark.parametrize("quantization", ["int4", "int8", "int8-split"])
@pytest.mark.parametrize("variant", ["llama", "llama-untied-llama3rope", "qwen2"])
def test_native_step_equals_the_layer_by_layer_path(
    variant, quantization, tiles, tmp_path, smollm2_folder, monkeypatch
):
    if tiles and not quantization_module.tile_kind():
        pytest.skip("no bf16 tiles on this CPU (AMX or AVX-512 BF16)")
    if not tiles:
        monkeypatch.setattr(quantization_module, "tile_kind", lambda: None)
    if quantization == "int8-split":
        quantization = "int8"
        monkeypatch.setattr(layers, "quantize", _split_int8)
    model_type, overrides = TINY_VARIANTS[variant]
    folder = make_tiny_model(str(tmp_path), smollm2_folder, model_type, **overrides)
    calls = []
    native_call = NativeDecodeStep.__call__
    monkeypatch.setattr(
        NativeDecodeStep, "__call__", lambda self, *a: calls.append(1) or native_call(self, *a)
    )
    runner = DirectRunner(folder, quantization=quantization)
    split = [m.matmul.w.split for m in runner.runner.model.modules() if getattr(m, "matmul", 0)]
    assert split and all(split) == (layers.quantize is _split_int8)
    ours = decode_logits(runner, steps=4)
    # every step ran natively: the 4 decodes and the 3 prefills (extends of up to
    # torch_backend.SHORT_EXTEND tokens attend as one query row a token)
    assert len(calls) == 4 + len(PROMPTS)

    monkeypatch.setattr(NativeDecodeStep, "for_model", classmethod(lambda cls, m, p: None))
    reference = decode_logits(DirectRunner(folder, quantization=quantization), steps=4)
    for a, b in zip(ours, reference):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_the_step_does_not_apply_to_float_weights_or_qk_norm(tmp_path, smollm2_folder):
    model_type, overrides = TINY_VARIANTS["qwen3"]
    qwen3 = make_tiny_model(str(tmp_path / "qwen3"), smollm2_folder, model_type, **overrides)
    for folder, quantization in ((qwen3, "int4"), (qwen3, "none")):
        runner = DirectRunner(folder, quantization=quantization).runner
        assert NativeDecodeStep.for_model(runner.model, runner.kv_pool) is None


def test_native_step_reads_and_writes_a_bf16_cache(tmp_path, smollm2_folder, monkeypatch):
    """--kv-cache-dtype bfloat16 beside float32 activations: the one-call step writes and reads
    the bf16 pool as the layer-by-layer path does (torch's cast, then float32 attention)."""
    model_type, overrides = TINY_VARIANTS["llama"]
    folder = make_tiny_model(str(tmp_path), smollm2_folder, model_type, **overrides)
    calls = []
    native_call = NativeDecodeStep.__call__
    monkeypatch.setattr(
        NativeDecodeStep, "__call__", lambda self, *a: calls.append(1) or native_call(self, *a)
    )
    runner = DirectRunner(folder, quantization="int4", kv_cache_dtype="bfloat16")
    assert runner.runner.kv_pool.k_heads[0].dtype == torch.bfloat16
    ours = decode_logits(runner, steps=4)
    assert len(calls) == 4 + len(PROMPTS)  # the decodes and the short prefills
    monkeypatch.setattr(NativeDecodeStep, "for_model", classmethod(lambda cls, m, p: None))
    reference = decode_logits(
        DirectRunner(folder, quantization="int4", kv_cache_dtype="bfloat16"), steps=4
    )
    for a, b in zip(ours, reference):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
