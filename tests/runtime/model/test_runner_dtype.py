"""`--dtype auto` picks what is fastest where the model runs."""

import torch

from runtime.model.runner import cpu_has_native_bf16, pick_dtype


def test_auto_is_bf16_on_cuda_and_on_cpus_with_native_bf16_else_fp32():
    assert pick_dtype("auto", "cuda") is torch.bfloat16
    expected = torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    assert pick_dtype("auto", "cpu") is expected


def test_an_explicit_dtype_is_kept():
    for name, dtype in [("float32", torch.float32), ("bfloat16", torch.bfloat16)]:
        assert pick_dtype(name, "cpu") is dtype and pick_dtype(name, "cuda") is dtype


def test_quantized_weights_take_fp32_activations_on_the_cpu_only():
    # the native kernels and the whole-step decode take fp32 rows, bf16 CPUs included
    assert pick_dtype("auto", "cpu", quantized=True) is torch.float32
    assert pick_dtype("auto", "cuda", quantized=True) is torch.bfloat16
    assert pick_dtype("bfloat16", "cpu", quantized=True) is torch.bfloat16
