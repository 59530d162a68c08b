"""Quantized weights on the CPU: the GGUF's own codes, every matmul path against the dense
product, the native RMSNorm and rotary against torch, and the whole model's quality."""

import math

import pytest
import torch

from runtime.model import qgemv, quantization
from runtime.model.layers import RMSNorm, RotaryEmbedding, apply_rotary
from runtime.model.loader import alias_gguf_path, gguf_file
from runtime.model.quantization import (
    QuantizationError,
    QuantizedMatmul,
    from_gguf_blocks,
    from_gguf_q4,
    pack_int4,
    quantize,
    unpack_int4,
)
from runtime.model.runner import pick_quantization
from tests.runtime.model.test_model_executor import DirectRunner

native = pytest.mark.skipif(qgemv.load() is None, reason="no AVX2 CPU or C compiler")


def test_q4_1_blocks_become_int4_codes_equal_to_the_files_values():
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(alias_gguf_path("smollm2"))
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    assert t.tensor_type.name == "Q4_1"
    rows, cols = (int(d) for d in reversed(t.shape))
    ours = from_gguf_q4(t.data, "Q4_1", rows, cols)
    reference = torch.from_numpy(dequantize(t.data, t.tensor_type).reshape(rows, cols))
    assert torch.allclose(ours.dequantize(), reference, rtol=0, atol=1e-6)
    lib = qgemv.load()
    if lib is not None:  # the kernels' own dequantization reads the same values
        assert torch.allclose(qgemv.NativeMatmul(lib, ours).dequantize(), reference, atol=1e-6)


def test_q8_0_blocks_become_int8_codes_equal_to_the_files_values():
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from runtime.model.quantization import read_gguf_weights

    reader = GGUFReader(alias_gguf_path("smollm2"))
    t = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert t.tensor_type.name == "Q8_0"  # the embedding and tied LM head
    rows, cols = (int(d) for d in reversed(t.shape))
    reference = torch.from_numpy(dequantize(t.data, t.tensor_type).reshape(rows, cols))
    ours = from_gguf_blocks(t.data, "Q8_0", rows, cols)
    assert ours.kind == "int8" and torch.equal(ours.dequantize(), reference)
    lib = qgemv.load()
    if lib is not None:
        assert torch.equal(qgemv.NativeMatmul(lib, ours).dequantize(), reference)
    # what a model loads: the file's codes, for int4 and int8 models alike
    for kind in ("int4", "int8"):
        weights = dict(read_gguf_weights(alias_gguf_path("smollm2"), kind))
        embedding = weights["model.embed_tokens.weight"]
        assert embedding.kind == "int8" and torch.equal(embedding.dequantize(), reference)


def _k_quant_blocks(kind_name: str, rows: int, cols: int, seed: int = 0):
    """Random GGUF K-quant bytes (super-blocks of 256) with finite scales, as a quantizer
    writes them, and their values by gguf's reader. Q4_K (144 bytes: f16 d and dmin, 12 of
    6-bit scales and minimums, 128 of codes), Q5_K (176: the same and 32 of fifth bits), Q6_K
    (210: 128 low and 64 high bits of the codes, 16 int8 scales, f16 d)."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    rng = np.random.default_rng(seed)
    if kind_name in GGUF_WRITES:
        from gguf.quants import quantize

        values = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
        raw = quantize(values, GGMLQuantizationType[kind_name])
        values = dequantize(raw, GGMLQuantizationType[kind_name]).reshape(rows, cols)
        return raw, torch.from_numpy(values)
    size = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[kind_name]
    raw = rng.integers(0, 256, (rows, cols // 256, size), dtype=np.uint8)
    if kind_name == "Q6_K":
        d = rng.uniform(0.0005, 0.002, (rows, cols // 256, 1)).astype(np.float16)
        raw[..., 208:210] = d.view(np.uint8)
    else:
        halves = rng.uniform(0.001, 0.05, (rows, cols // 256, 2)).astype(np.float16)
        raw[..., 0:4] = halves.view(np.uint8)
    raw = raw.reshape(rows, -1)
    values = dequantize(raw, GGMLQuantizationType[kind_name]).reshape(rows, cols)
    return raw, torch.from_numpy(values)


GGUF_WRITES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")  # gguf's own quantizers make these


@pytest.mark.parametrize("kind_name", ["Q4_K", "Q5_K", "Q6_K", *GGUF_WRITES])
def test_gguf_blocks_become_codes_equal_to_the_files_values(kind_name):
    """Q4_0 (w = d * (q - 8)), Q4_1 and Q4_K as int4 (groups of 32 with a zero point), Q5_K
    and Q5_1 as int8 codes 0..31 with a zero point, Q5_0 as codes -16..15, Q8_0 as its int8
    codes, Q6_K as int8 codes with a scale per 16: the file's
    own values, up to one float32 rounding, read alike by every kernel (AVX2 and, where
    present, AVX-512 VNNI) at every row count."""
    rows, cols = 48, 768  # three super-blocks a row; 48 rows: bf16 tiles where present
    raw, reference = _k_quant_blocks(kind_name, rows, cols)
    ours = from_gguf_blocks(raw, kind_name, rows, cols)
    assert ours.kind == quantization.EXACT_TYPES[kind_name]
    assert ours.split == (kind_name == "Q6_K")
    assert torch.allclose(ours.dequantize(), reference, rtol=1e-6, atol=1e-6)
    lib = qgemv.load()
    if lib is None:
        return
    native = qgemv.NativeMatmul(lib, ours)
    assert torch.allclose(native.dequantize(), reference, rtol=1e-6, atol=1e-6)
    torch.manual_seed(0)
    try:
        for avx512 in {False, qgemv.avx512_vnni()}:
            lib.set_avx512(int(avx512), int(avx512))  # every row count on one kernel
            for n in (1, 2, 3, 4, 5, 8, 9, 16, 17):
                x = torch.randn(n, cols)
                ref = x @ reference.T
                assert (native(x) - ref).abs().max() / ref.abs().max() < 1e-4, (avx512, n)
    finally:
        qgemv.use_avx512(lib, qgemv.avx512_wanted())
    matmul = QuantizedMatmul(ours)
    tolerance = 1e-2 if matmul.use_tiles else 1e-4  # bf16 tiles: bf16 products
    for n in (1, 3):
        x = torch.randn(n, cols)
        ref = x @ reference.T
        assert (matmul(x) - ref).abs().max() / ref.abs().max() < tolerance


def test_pack_unpack_round_trip_and_rounding_bounds():
    codes = torch.randint(0, 16, (6, 64), dtype=torch.uint8)
    assert torch.equal(unpack_int4(pack_int4(codes)), codes)
    w = torch.randn(48, 96)
    int8 = quantize(w, "int8")
    assert int8.scale.shape == (48, 3)  # a scale per group of 32
    assert ((int8.dequantize() - w).abs() <= int8.scale.repeat_interleave(32, 1) / 2 + 1e-6).all()
    int4 = quantize(w, "int4")
    step = int4.scale.repeat_interleave(32, dim=1)
    assert ((int4.dequantize() - w).abs() <= step / 2 + 1e-5).all()
    with pytest.raises(QuantizationError):
        quantize(torch.randn(4, 40), "int4")


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("path", ["native", "torch", "tiles"])
def test_every_matmul_path_matches_the_dense_product(kind, path, monkeypatch):
    if path != "torch" and qgemv.load() is None:
        pytest.skip("no AVX2 CPU or C compiler")
    if path == "tiles" and not quantization.tile_kind():
        pytest.skip("no bf16 tiles on this CPU (AMX or AVX-512 BF16)")
    if path != "tiles":
        monkeypatch.setattr(quantization, "tile_kind", lambda: None)
    if path == "torch":
        monkeypatch.setattr(qgemv, "load", lambda: None)  # torch's weight-only kernels
    torch.manual_seed(0)
    w, bias = torch.randn(160, 96), torch.randn(160)
    q = quantize(w, kind)
    matmul = QuantizedMatmul(q)
    assert (matmul.native is not None) == (path != "torch")
    assert matmul.use_tiles == (path == "tiles")
    dense = q.dequantize()
    # native kernels: int16 activations; torch's: bf16 activations and output; tiles: bf16
    # activations and weights past one row
    tolerance = {"native": 1e-4, "torch": 2e-2, "tiles": 1e-2}[path]
    for rows in (1, 3, 4, 5, 16, 17, 80):
        x = torch.randn(rows, 96)
        ref = x @ dense.T + bias
        err = (matmul(x, bias) - ref).abs().max() / ref.abs().max()
        assert err < tolerance, (rows, float(err))
    ids = torch.tensor([3, 0, 159])
    assert torch.equal(matmul.rows(ids, torch.float32), dense[ids])


@pytest.mark.skipif(not quantization.tile_kind(), reason="no bf16 tiles on this CPU")
def test_deterministic_inference_keeps_every_row_on_the_codes():
    fast = DirectRunner("smollm2", quantization="int4")
    fixed = DirectRunner("smollm2", quantization="int4", enable_deterministic_inference=True)
    prompt = list(range(1000, 1012))
    same = {}
    for name, runner in (("fast", fast), ("fixed", fixed)):
        others = [f"r{i}" for i in range(15)]  # beside 1 and 15 others (the LM head's int8
        for request in ["a", *others]:  # products had another kernel from 16 rows on)
            runner.forward([(request, prompt, 0)])
        (alone,) = runner.forward([("a", [7], len(prompt))])  # a decode step of one row
        same[name] = True
        for count in (1, 15):  # up to 16 rows (more: a dense GEMM over the dequantized LM head)
            chunks = [(r, [9], len(prompt)) for r in others[:count]]
            beside = runner.forward([("a", [7], len(prompt)), *chunks])[0]
            same[name] = same[name] and torch.equal(alone, beside)
    qgemv.use_avx512(qgemv.load(), qgemv.avx512_wanted())  # the process default again
    assert same["fixed"]  # (the fast path runs one row on the codes and more in bf16)
    fast_layer, fixed_layer = (
        r.runner.model.layers[0].mlp.gate_up_proj.matmul for r in (fast, fixed)
    )
    assert fast_layer.tiles is not None and not fixed_layer.use_tiles and fixed_layer.tiles is None


@pytest.mark.skipif(not quantization.tile_kind(), reason="no bf16 tiles on this CPU")
def test_bf16_tiles_multiply_like_torch_on_bf16_values():
    torch.manual_seed(0)
    # an odd number of 16-column tiles first; rows: every block of 8 held in registers, and
    # more than one chunk of 64
    for n, k in ((48, 64), (160, 96), (576, 1536)):
        w = torch.randn(n, k).to(torch.bfloat16)
        tiles = qgemv.bf16_tiles(w)
        for rows in (1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 40, 64, 130):
            x = torch.randn(rows, k)
            ref = x.to(torch.bfloat16).double() @ w.double().T  # bf16 inputs, exact sums
            err = (qgemv.tiles_linear(tiles, x).double() - ref).abs().max() / ref.abs().max()
            assert err < 1e-5, (n, k, rows, float(err))


@native
def test_native_silu_follows_torch_over_the_whole_float_range():
    """silu_mul's 8-lane exp (qgemv.c exp8) against torch, on gates from -inf to inf, NaN
    included, in vector lanes and in the scalar tail alike."""
    special = [float("nan"), float("-inf"), float("inf"), -1e38, -100.0, -88.8, -88.7, -87.0]
    special += [-86.4, -20.0, -1e-3, 0.0, 1e-3, 20.0, 86.6, 88.72, 88.8, 100.0, 1e38]
    gates = torch.cat([torch.tensor(special), torch.linspace(-120, 120, 4001)])
    for tail in (0, 3):  # lengths a multiple of 8, and not
        g = gates[: len(gates) - len(gates) % 8 + tail]
        up = torch.linspace(0.5, 2.0, len(g))
        ours = qgemv.silu_mul(torch.cat([g, up]).view(1, -1))[0].double()
        ref = torch.nn.functional.silu(g.double()) * up.double()
        assert torch.equal(ours.isnan(), ref.isnan()) and torch.equal(ours.isinf(), ref.isinf())
        finite = ref.isfinite()
        err = (ours[finite] - ref[finite]).abs() / ref[finite].abs().clamp_min(1e-30)
        assert err.max() < 1e-6, float(err.max())


@native
@pytest.mark.parametrize("n", [3, 300])  # 300 rows: split between threads (PARALLEL_ROWS)
def test_native_norm_rotary_activation_and_kv_write_match_torch(n):
    from runtime.model.config import RopeConfig

    torch.manual_seed(0)
    norm = RMSNorm(64, 1e-5)
    norm.weight.data = torch.randn(64)
    x = torch.randn(n, 64) * 3
    ours = norm(x)
    ref = torch.nn.functional.rms_norm(x, (64,), norm.weight, 1e-5)
    assert torch.allclose(ours, ref, atol=1e-5)

    heads, kv_heads, dim = 4, 2, 16
    rotary = RotaryEmbedding(dim, 128, RopeConfig(theta=10000.0))
    positions = torch.randint(0, 128, (n,))
    qkv = torch.randn(n, (heads + 2 * kv_heads) * dim)
    q = qkv[:, : heads * dim].reshape(n, heads, dim)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].reshape(n, kv_heads, dim)
    q_ref, k_ref = apply_rotary(q, k, rotary.table(positions, torch.float32))
    v_before = qkv[:, (heads + kv_heads) * dim :].clone()
    assert rotary.for_batch(positions, torch.float32).rotate_qkv_inplace(qkv, heads, kv_heads, dim)
    assert torch.allclose(qkv[:, : heads * dim].view(n, heads, dim), q_ref, atol=1e-5)
    k_ours = qkv[:, heads * dim : (heads + kv_heads) * dim].view(n, kv_heads, dim)
    assert torch.allclose(k_ours, k_ref, atol=1e-5)
    assert torch.equal(qkv[:, (heads + kv_heads) * dim :], v_before)  # v untouched

    gate_up = torch.randn(n, 2 * 40)
    gate, up = gate_up.chunk(2, dim=-1)
    assert torch.allclose(qgemv.silu_mul(gate_up), torch.nn.functional.silu(gate) * up, atol=1e-6)
    pool, rows = torch.zeros(2, n + 16, 16), torch.randn(n, 2, 16)
    slots = torch.randperm(n + 16)[:n]
    expected = pool.clone()
    expected.transpose(0, 1)[slots] = rows
    assert qgemv.write_kv(pool, slots, rows) and torch.equal(pool, expected)


def test_auto_keeps_the_files_precision_on_the_cpu_only():
    smollm2 = gguf_file("smollm2")
    assert pick_quantization("auto", "cpu", smollm2) == "int4"  # a Q4_1 file
    assert pick_quantization("auto", "cpu", None) is None  # a float folder
    assert pick_quantization("auto", "cuda", smollm2) is None
    assert pick_quantization("none", "cpu", smollm2) is None
    assert pick_quantization("int8", "cpu", smollm2) == "int8"
    with pytest.raises(QuantizationError, match="CPU only"):
        pick_quantization("int4", "cuda", smollm2)


def _perplexity(runner: DirectRunner, ids: list[int], chunk: int) -> float:
    nll = 0.0
    for start in range(0, len(ids) - 1, chunk):
        part = ids[start : min(start + chunk, len(ids) - 1)]
        (logits,) = runner.forward([("text", part, start)])
        target = torch.tensor(ids[start + 1 : start + 1 + len(part)])
        nll += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
    return math.exp(nll / (len(ids) - 1))


@native
@pytest.mark.parametrize(
    "tokens", [1000, pytest.param(5000, marks=pytest.mark.slow, id="5000-slow")]
)
def test_int4_model_keeps_the_float_models_perplexity_and_greedy_tokens(tokens, one_thread):
    """Perplexity on Python's documentation (tests/data/perplexity_text.txt, 5,000 tokens from
    pydoc_data; the first 1,000 in `make test`), and greedy continuations, of the Q4_1 file run
    as int4 codes against the same file dequantized to float32. Measured on all 5,000 tokens:
    10.9098 against 10.9099 on the int4 codes, 10.9151 (+0.05%) where AMX tiles run the
    16-token chunks."""
    from pathlib import Path

    from runtime.model.loader import load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(resolve_model_path("smollm2"))
    text = (Path(__file__).parents[2] / "data" / "perplexity_text.txt").read_text()
    ids = tokenizer(text)["input_ids"][:tokens]
    assert len(ids) == tokens

    int4 = DirectRunner("smollm2", dtype="float32", quantization="int4", max_total_tokens=8000)
    assert int4.runner.quantization == "int4"
    layer = int4.runner.model.layers[0].mlp.gate_up_proj
    assert layer.weight is None and layer.matmul is not None  # no float copy is kept
    dense = DirectRunner("smollm2", dtype="float32", quantization="none", max_total_tokens=8000)
    # chunks of 16 tokens run the quantized kernels, as decode steps do
    ppl_int4 = _perplexity(int4, ids, 16)
    ppl_float = _perplexity(dense, ids, 1000)
    assert abs(ppl_int4 / ppl_float - 1) < 0.01, (ppl_int4, ppl_float)

    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]
    same = total = 0
    for n, prompt in enumerate(prompts):
        prompt_ids = tokenizer(prompt)["input_ids"]
        a, b = _greedy(int4, f"p{n}", prompt_ids, 24), _greedy(dense, f"p{n}", prompt_ids, 24)
        same += sum(x == y for x, y in zip(a, b))
        total += len(a)
    print(
        f"perplexity int4 {ppl_int4:.4f} float32 {ppl_float:.4f}; same greedy tokens {same}/{total}"
    )
    assert same / total >= 0.9


def _greedy(runner: DirectRunner, name: str, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens, one single-token forward each (the decode kernels)."""
    (logits,) = runner.forward([(name, prompt, 0)])
    out = [int(logits[-1].argmax())]
    for i in range(n - 1):
        (logits,) = runner.forward([(name, out[-1:], len(prompt) + i)])
        out.append(int(logits[-1].argmax()))
    return out


@native
@pytest.mark.parametrize("dim", [16, 80])  # 80: a 64-dim block of the output and a rest
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
def test_native_decode_attention_matches_the_torch_path(kv_dtype, dim, monkeypatch):
    """The one-call decode attention against the gather + bmm path, ragged cached lengths (a
    block of 8 rows, part of one, both), GQA, on a float32 pool and a bf16 one
    (--kv-cache-dtype bfloat16 beside a float32 model)."""
    from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool
    from runtime.model.attention.base import ForwardBatch
    from runtime.model.attention.torch_backend import TorchAttentionBackend

    torch.manual_seed(0)
    heads, kv_heads, lens = 6, 2, [1, 8, 30]
    reqs = ReqToTokenPool(4, 64)
    kv = TokenToKVPool(200, 1, kv_heads, dim, kv_dtype)
    rows = [reqs.alloc() for _ in lens]
    for row, n in zip(rows, lens):
        slots = kv.alloc(n)
        reqs.req_to_token[row, :n] = slots.int()
        kv.set_kv(
            0, slots[:-1], torch.randn(n - 1, kv_heads, dim), torch.randn(n - 1, kv_heads, dim)
        )
    new = reqs.req_to_token[rows, [n - 1 for n in lens]].long()
    batch = ForwardBatch(
        input_ids=torch.zeros(3, dtype=torch.long),
        positions=torch.tensor([n - 1 for n in lens]),
        out_cache_loc=new,
        req_pool_indices=rows,
        extend_lens=[1, 1, 1],
        seq_lens=lens,
        logit_rows=torch.arange(3),
    )
    q, k, v = (
        torch.randn(3, heads, dim),
        torch.randn(3, kv_heads, dim),
        torch.randn(3, kv_heads, dim),
    )
    backend = TorchAttentionBackend(reqs, kv)
    backend.init_forward_metadata(batch)
    ours = backend.forward(q, k, v, 0, batch)
    # the native write rounds as torch's cast does
    assert torch.equal(kv.k_buffers[0][new], k.to(kv_dtype))
    assert torch.equal(kv.v_buffers[0][new], v.to(kv_dtype))
    meta = batch.metadata
    assert (
        qgemv.decode_attention(q, kv.k_heads[0], kv.v_heads[0], meta.decode_slots, meta.decode_lens)
        is not None
    )
    monkeypatch.setattr(qgemv, "decode_attention", lambda *a: None)
    reference = backend.forward(q, k, v, 0, batch)
    assert torch.allclose(ours, reference, atol=1e-5)


def test_finer_gguf_matrices_keep_their_bits_in_an_int4_model(monkeypatch):
    """--quantization auto on a 4-bit file with 6-bit matrices (as Q4_K_M files have): those
    come as int8 codes marked finer, and a layer holding one runs int8: its 6-bit and 4-bit
    parts keep the file's values exactly, other parts (here a 3-bit matrix, read as floats)
    are rounded once, to int8, whatever their order; asked for int4, everything is rounded
    to 4 bits as before."""
    from types import SimpleNamespace

    from runtime.model import gguf_convert
    from runtime.model.gguf_convert import GGUFBlocks
    from runtime.model.layers import ColumnParallelLinear
    from runtime.model.quantization import read_gguf_weights

    rows, cols = 32, 512
    q_raw, q_values = _k_quant_blocks("Q4_K", rows, cols, seed=1)
    v_raw, v_values = _k_quant_blocks("Q6_K", rows, cols, seed=2)
    k_values = torch.randn(rows, cols)  # a Q3_K matrix's values: not kept, read as floats
    files = {  # GGUF name: (type, raw blocks, values)
        "blk.0.attn_q.weight": ("Q4_K", q_raw, q_values),
        "blk.0.attn_k.weight": ("Q3_K", None, k_values),
        "blk.0.attn_v.weight": ("Q6_K", v_raw, v_values),
    }
    reader = SimpleNamespace(
        tensors=[
            SimpleNamespace(name=n, tensor_type=SimpleNamespace(name=t), shape=(cols, rows))
            for n, (t, _, _) in files.items()
        ]
    )

    def fake_iter(reader, config, arch, keep):
        for gguf_name, (kind, raw, values) in files.items():
            name = gguf_convert.hf_name(gguf_name)
            if kind in keep:
                yield name, GGUFBlocks(kind, raw, rows, cols, None)
            else:  # as iter_gguf_weights: the values, as float32
                yield name, values.numpy().copy()

    monkeypatch.setattr(gguf_convert, "open_gguf", lambda path: (reader, {}, "llama"))
    monkeypatch.setattr(gguf_convert, "iter_gguf_weights", fake_iter)
    kept = dict(read_gguf_weights("model.gguf", "int4", keep_precision=True))
    plain = dict(read_gguf_weights("model.gguf", "int4"))
    v_kept = kept["model.layers.0.self_attn.v_proj.weight"]
    assert v_kept.kind == "int8" and v_kept.finer and v_kept.split
    assert torch.allclose(v_kept.dequantize(), v_values, rtol=1e-6, atol=1e-7)
    assert kept["model.layers.0.self_attn.k_proj.weight"].finer  # the same layer's floats
    assert not kept["model.layers.0.self_attn.q_proj.weight"].finer  # 4-bit codes
    assert not plain["model.layers.0.self_attn.v_proj.weight"].finer

    names = [f"model.layers.0.self_attn.{p}_proj.weight" for p in "qkv"]
    dense = torch.cat([q_values, k_values, v_values])
    for weights, kind, order in (
        (kept, "int8", [0, 1, 2]),
        (kept, "int8", [1, 0, 2]),
        (plain, "int4", [0, 1, 2]),
    ):
        layer = ColumnParallelLinear(cols, [rows] * 3, bias=False, quantization="int4")
        for block in order:
            layer.load(block, weights[names[block]])
        w = layer.matmul.w
        assert w.kind == kind
        top = dense.abs().view(3 * rows, -1, 32).amax(dim=2).repeat_interleave(32, dim=1)
        error = (w.dequantize() - dense).abs() / top
        if kind == "int8":  # the file's codes exactly; the floats rounded once (1/254)
            assert w.split and w.zero is not None
            assert error[:rows].max() < 1e-6 and error[2 * rows :].max() < 1e-6
            assert error[rows : 2 * rows].max() < 1 / 254 + 1e-6
            if qgemv.load() is not None:
                x = torch.randn(3, cols)
                ref = x @ dense.T
                native = layer.matmul.native
                assert (native(x) - ref).abs().max() / ref.abs().max() < 2e-3
        else:  # int4: 16 levels from the group's least to its largest (1/15 of the largest)
            assert error.max() < 1 / 15 + 1e-6
            assert error.max() > 0.01  # the 4-bit rounding is what keeping the file's bits avoids


def test_short_extends_are_query_rows_only_where_the_native_kernel_reads_them():
    """One query row a token for short extends with float32 queries on the CPU (the native
    decode kernel); with other queries they would go through the gather + bmm fallback, which
    copies the prefix once per row, so they stay on scaled_dot_product_attention."""
    from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool
    from runtime.model.attention.base import ForwardBatch
    from runtime.model.attention.torch_backend import SHORT_EXTEND, TorchAttentionBackend

    reqs, kv = ReqToTokenPool(2, 64), TokenToKVPool(64, 1, 2, 16, torch.float32)
    for dtype, rows in ((torch.float32, SHORT_EXTEND), (torch.bfloat16, 1), (None, 1)):
        if dtype is torch.float32 and qgemv.load() is None:
            rows = 1
        backend = TorchAttentionBackend(reqs, kv, dtype)
        assert backend.query_rows == rows
        row = reqs.alloc()
        reqs.req_to_token[row, :10] = kv.alloc(10).int()
        batch = ForwardBatch(
            input_ids=torch.zeros(4, dtype=torch.long),
            positions=torch.arange(6, 10),
            out_cache_loc=reqs.req_to_token[row, 6:10].long(),
            req_pool_indices=[row],
            extend_lens=[4],
            seq_lens=[10],
            logit_rows=torch.arange(4),
        )
        backend.init_forward_metadata(batch)
        meta = batch.metadata
        assert (meta.decode_lens is not None) == (rows > 1)
        if rows > 1:  # each token attends to the tokens before it and itself
            assert meta.decode_lens.tolist() == [7, 8, 9, 10] and not meta.extends
        reqs.free(row)
        kv.clear()


@pytest.mark.skipif(not quantization.tile_kind(), reason="no bf16 tiles on this CPU")
def test_tiles_are_made_at_load_where_products_run(tmp_path, smollm2_folder):
    from tests.runtime.conftest import TINY_VARIANTS, make_tiny_model

    model_type, overrides = TINY_VARIANTS["llama-untied-llama3rope"]
    folder = make_tiny_model(str(tmp_path), smollm2_folder, model_type, **overrides)
    model = DirectRunner(folder, quantization="int8").runner.model
    assert model.lm_head.matmul.tiles is not None  # made before any step
    assert model.layers[0].mlp.gate_up_proj.matmul.tiles is not None
    assert model.embed_tokens.matmul.tiles is None  # an untied embedding only looks rows up
