"""Loads the model and owns the KV pools and the attention backend; runs one forward at a time."""

from __future__ import annotations

import logging
import os
import time

import torch

from runtime.cache.memory_pool import ReqToTokenPool, TokenToKVPool, kv_cache_dtype
from runtime.model import qgemv
from runtime.model.attention.base import ForwardBatch
from runtime.model.attention.registry import create_attention_backend
from runtime.model.config import ModelConfig
from runtime.model.loader import gguf_file, iter_safetensors, resolve_model_path
from runtime.model.models.llama import LlamaForCausalLM
from runtime.model.parallel import (
    ParallelConfig,
    TensorParallel,
    TensorParallelError,
    check_shapes,
    cpu_threads_per_rank,
    head_shard,
)
from runtime.model.quantization import QuantizationError, read_gguf_weights
from runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_MAX_CPU_KV_TOKENS = 1 << 18


def available_host_memory() -> int:
    """Bytes the kernel could hand out now: MemAvailable counts the page cache it can drop,
    which free pages alone (SC_AVPHYS_PAGES) do not, so that a machine that has just read many
    files does not look out of memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def pick_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def cpu_has_native_bf16() -> bool:
    """Whether the CPU computes in bf16 itself (AVX512-BF16 or AMX); without it torch converts
    every bf16 operand to fp32 and back, which makes bf16 slower than fp32."""
    return bool({"avx512_bf16", "amx_bf16"} & qgemv.cpu_flags())


def pick_dtype(name: str, device: str = "cpu", quantized: bool = False) -> torch.dtype:
    """`auto`: bf16 on CUDA and on CPUs with native bf16 (there decode reads half the bytes:
    1.6x faster than fp32 single-stream, README); fp32 on other CPUs, where bf16 prefill was
    measured 6.9x and batch-16 decode 3.4x slower than fp32 (benchmarks/bench_dtype.py).
    With quantized weights (`quantized`) on the CPU, activations are fp32 everywhere: the
    weights' bytes are what decode reads, and our kernels and whole-step decode take fp32
    (bf16 activations cost the int4 SmolLM2 half its batch-1 speed on a Xeon with AMX)."""
    if name != "auto":
        return _DTYPES[name]
    if device == "cpu" and (quantized or not cpu_has_native_bf16()):
        return torch.float32
    return torch.bfloat16


_INT4_TYPES = ("Q4_0", "Q4_1", "Q4_K")
_FLOAT_TYPES = ("F32", "F16", "BF16")


def pick_quantization(
    name: str, device: str, gguf_path: str | None, tp_size: int = 1
) -> str | None:
    """The weight kind the decoder layers run in (None: the float dtype). `auto` keeps a GGUF
    file's precision on the CPU: int4 for 4-bit files, int8 for other quantized ones, floats
    for float files and Hugging Face folders; on CUDA, and with tensor parallelism (whose
    shards the quantized kernels do not cut yet), it is always the float dtype."""
    if name == "none" or (name == "auto" and (device != "cpu" or tp_size > 1)):
        return None
    if tp_size > 1:
        raise QuantizationError(
            f"--quantization {name} does not run with --tp-size {tp_size} yet "
            "(use auto or none: float weights)"
        )
    if device != "cpu":
        raise QuantizationError(f"--quantization {name} runs on the CPU only")
    if name != "auto":
        return name
    if gguf_path is None:
        return None
    from runtime.model.gguf_convert import gguf_matrix_types

    types = gguf_matrix_types(gguf_path)
    if all(t in _FLOAT_TYPES for t in types):
        return None
    return "int4" if sum(t in _INT4_TYPES for t in types) * 2 > len(types) else "int8"


class ModelRunner:
    """The model, its KV memory and the attention backend for one device."""

    def __init__(self, args: ServerArgs, parallel: ParallelConfig | None = None, on_loaded=None):
        """`parallel`: this process's tensor-parallel rank; `on_loaded()` runs once the weights
        are in, before the ranks meet (a rank that cannot load fails before anyone waits)."""
        self.args = args
        parallel = parallel or ParallelConfig()
        self.device = pick_device(args.device)
        self.model_folder = resolve_model_path(args.model_path)
        self.gguf_path = gguf_file(args.model_path)
        self.quantization = pick_quantization(
            args.quantization, self.device, self.gguf_path, parallel.tp_size
        )
        self.dtype = pick_dtype(args.dtype, self.device, self.quantization is not None)
        self.kv_dtype = kv_cache_dtype(args.kv_cache_dtype, self.dtype)
        self.config = ModelConfig.from_folder(self.model_folder)
        check_shapes(self.config, parallel.tp_size)
        if parallel.tp_size > 1 and self.device == "cpu" and args.cpu_threads is None:
            torch.set_num_threads(cpu_threads_per_rank(parallel.local_ranks))
        self.local_ranks = parallel.local_ranks
        self.tp = TensorParallel(parallel, self.device)
        self.context_length = min(
            args.context_length or self.config.max_position_embeddings,
            self.config.max_position_embeddings,
        )
        start = time.perf_counter()
        self.model = self._load_model()
        if on_loaded is not None:
            on_loaded()
        self.tp.connect()
        logger.info(
            "loaded %s (%s weights) in %.2fs",
            self.gguf_path or self.model_folder,
            self.quantization or str(self.dtype).removeprefix("torch."),
            time.perf_counter() - start,
        )
        self.req_to_token_pool = ReqToTokenPool(
            args.max_running_requests + 1, self.context_length + 1, self.device
        )
        self.kv_pool = TokenToKVPool(
            self.tp.min_int(self._kv_pool_size()),  # the same slots on every rank
            self.config.num_layers,
            head_shard(self.config, self.tp.rank, self.tp.size).kv_heads,
            self.config.head_dim,
            self.kv_dtype,
            self.device,
        )
        backend = args.attention_backend or ("triton" if self.device == "cuda" else "torch")
        self.attention_backend = create_attention_backend(
            backend, self.req_to_token_pool, self.kv_pool, self.dtype
        )
        self.decode_graphs = None
        if self._use_cuda_graphs(backend):
            from runtime.model.cuda_graph import DecodeGraphs

            self.decode_graphs = DecodeGraphs(
                self, min(args.cuda_graph_max_bs, args.max_running_requests)
            )

    def _use_cuda_graphs(self, backend: str) -> bool:
        """CUDA graphs for decode steps: on CUDA with the triton backend (whose metadata a graph
        can hold), without tensor parallelism (its ranks run steps rank 0 sends, eagerly)."""
        if self.device != "cuda" or self.args.disable_cuda_graph:
            return False
        if backend != "triton" or self.tp.enabled:
            logger.info("CUDA graphs off: they run with the triton backend and --tp-size 1")
            return False
        return True

    def _load_model(self) -> LlamaForCausalLM:
        torch.manual_seed(self.args.random_seed)
        model = LlamaForCausalLM(
            self.config, self.config.max_position_embeddings, self.quantization, self.tp
        )
        if self.quantization and self.gguf_path:
            keep = self.args.quantization == "auto"  # each matrix at least its file's bits
            weights = read_gguf_weights(self.gguf_path, self.quantization, keep_precision=keep)
        else:
            weights = iter_safetensors(self.model_folder)
        model.load_weights(weights)
        if self.args.enable_deterministic_inference:  # every row on the codes, whatever the batch
            for module in model.modules():
                if getattr(module, "matmul", None) is not None:
                    module.matmul.use_tiles = False
            lib = qgemv.load()
            if lib is not None:
                qgemv.use_avx512(lib, qgemv.avx512_wanted(), invariant=True)
        for module in model.modules():  # the bf16 tiles now, not in a first batch's step
            if module is model.embed_tokens and model.lm_head is not None:
                continue  # an untied embedding only looks rows up: no products, no tiles
            if getattr(module, "matmul", None) is not None:
                module.matmul.bf16_tiles()
        for p in model.parameters():  # buffers (rotary tables) stay float32
            p.data = p.data.to(dtype=self.dtype)
        return model.to(self.device).eval()  # parameters and buffers

    def _kv_pool_size(self) -> int:
        if self.args.max_total_tokens:
            return self.args.max_total_tokens
        cfg = self.config
        kv_heads = head_shard(cfg, self.tp.rank, self.tp.size).kv_heads
        per_token = (
            2 * cfg.num_layers * kv_heads * cfg.head_dim * torch.finfo(self.kv_dtype).bits // 8
        )
        if self.device == "cuda":
            free, _ = torch.cuda.mem_get_info()
            return int(free * self.args.mem_fraction // per_token)
        free = available_host_memory()
        share = self.args.mem_fraction / self.local_ranks  # the ranks here share the memory
        return max(1024, min(_MAX_CPU_KV_TOKENS, int(free * share // per_token)))

    def forward(self, batch: ForwardBatch) -> torch.Tensor | None:
        """Run the model on a ragged batch; returns float32 logits for `batch.logit_rows`
        (None on tensor-parallel ranks other than 0). With tensor parallelism, rank 0 sends
        the batch to the other ranks first, and any failure is a TensorParallelError: the
        ranks may have parted ways, so the group must not run another step."""
        if not self.tp.enabled:
            return self._forward(batch)
        try:
            if self.tp.rank == 0:
                self.tp.send_step(batch, self.req_to_token_pool.req_to_token)
            return self._forward(batch)
        except TensorParallelError:
            raise
        except Exception as exc:
            raise TensorParallelError(f"a tensor-parallel forward failed: {exc}") from exc

    def _forward(self, batch: ForwardBatch) -> torch.Tensor | None:
        if self.decode_graphs is not None and self.decode_graphs.can_run(batch):
            return self.decode_graphs.run(batch)
        self.attention_backend.init_forward_metadata(batch)
        hidden = self.model(batch, self.attention_backend)
        return self.model.compute_logits(hidden[batch.logit_rows])

    def serve_steps(self) -> None:
        """A rank > 0: run the forwards rank 0 sends until it says stop."""
        table = self.req_to_token_pool.req_to_token
        while (batch := self.tp.recv_step(table, ForwardBatch)) is not None:
            self.forward(batch)

    def stop_ranks(self) -> None:
        """Rank 0: release the other ranks from serve_steps, then leave the group."""
        if self.tp.enabled and self.tp.rank == 0:
            try:
                self.tp.send_stop()
            finally:
                self.tp.close()
