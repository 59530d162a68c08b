"""Decode steps replayed as CUDA graphs.

A decode step launches hundreds of small kernels (a few per layer); on a GPU the host's time
to launch them, not the GPU's work, bounds a small batch. At start-up the runner captures one
graph per batch-size bucket (1, 2, 4, 8, then every 8 up to `--cuda-graph-max-bs`) over
static buffers; a decode batch of `bs` requests is copied into the buffers, padded up to the
smallest bucket that holds it, and the bucket's graph is replayed.

Padding rows are decodes of one token at position 0 whose K/V go to slot 0 (the pool's
padding slot, never handed out) and whose slot table is a reserved row of zeros: they read and
write nothing a real request owns. Everything a graph runs reads the step only through the
static buffers (the attention metadata too: `init_decode_graph_metadata`), never a host value.

`DecodeGraphs(..., capture=False)` runs the same padded, static-buffer step eagerly: that is
how the CPU tests check the padding and buffer logic without a GPU.
"""

from __future__ import annotations

import logging
import time

import torch

from runtime.model.attention.base import ForwardBatch

logger = logging.getLogger(__name__)


def graph_batch_sizes(max_bs: int) -> list[int]:
    """The captured batch sizes: 1, 2, 4, 8, 16, 24, ... and max_bs itself."""
    sizes = {b for b in (1, 2, 4) if b < max_bs} | set(range(8, max_bs, 8)) | {max_bs}
    return sorted(sizes)


class DecodeGraphs:
    """Static buffers for decode batches of up to max_bs requests, and a graph per bucket."""

    def __init__(self, runner, max_bs: int, capture: bool = True):
        """`runner`: a ModelRunner whose backend has `init_decode_graph_metadata` (triton); its
        model and backend are kept, not the runner (which holds this object)."""
        self.model, self.backend = runner.model, runner.attention_backend
        self.sizes = graph_batch_sizes(max_bs)
        self.max_bs = self.sizes[-1]
        table = runner.req_to_token_pool
        device = table.req_to_token.device
        self.pad_row = table.alloc()  # padding requests read slot 0 through this row of zeros
        table.req_to_token[self.pad_row].zero_()
        # one block, its rows as ForwardBatch.packed lays a decode batch out (input ids,
        # positions, logit rows (unused here), slot-table rows, new tokens (always 1), tokens
        # with KV), then the KV slots; `padding` holds what padding rows read
        self.padding = torch.zeros((7, self.max_bs), dtype=torch.int64, device=device)
        self.padding[3] = self.pad_row
        self.padding[4:6] = 1
        self.static = self.padding.clone()
        self.input_ids, self.positions = self.static[0], self.static[1]
        self.request_lens = self.static[3:6]
        self.out_cache_loc = self.static[6]
        self.rows = torch.arange(self.max_bs, device=device)
        self.kv_indices = torch.zeros(
            self.max_bs * table.max_context, dtype=torch.int32, device=device
        )
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        if capture:
            self._capture_all()

    def can_run(self, batch: ForwardBatch) -> bool:
        """Whether `batch` is a decode-only batch small enough for a bucket."""
        n = len(batch.extend_lens)
        return 0 < n <= self.max_bs and batch.num_tokens == n

    def run(self, batch: ForwardBatch) -> torch.Tensor:
        """Logits of `batch.logit_rows`, as `ModelRunner.forward` returns them: the graph makes
        the final hidden states; the LM head runs on the real rows alone, outside it (one
        product, and no [bucket, vocabulary] output kept alive per bucket)."""
        bs = len(batch.extend_lens)
        size = next(s for s in self.sizes if s >= bs)
        if batch.packed is not None:  # one copy on the device
            self.static[:6, :bs].copy_(batch.packed)
        else:
            rows, _, seq_lens = batch.request_tensors(self.input_ids.device)
            self.input_ids[:bs].copy_(batch.input_ids)
            self.positions[:bs].copy_(batch.positions)
            self.request_lens[0, :bs].copy_(rows)
            self.request_lens[2, :bs].copy_(seq_lens)
        self.out_cache_loc[:bs].copy_(batch.out_cache_loc)
        if size > bs:  # a larger batch may have left real slots and rows there
            self.static[:, bs:size].copy_(self.padding[:, bs:size])
        if size in self.graphs:
            self.graphs[size].replay()
            hidden = self.outputs[size]
        else:
            hidden = self._step(size)
        hidden = hidden[:bs]
        if batch.logit_rows.numel() < bs:  # else every row, in order (rows ascend)
            hidden = hidden.index_select(0, batch.logit_rows)
        return self.model.compute_logits(hidden)

    def _step(self, size: int) -> torch.Tensor:
        """One decode step of the first `size` rows of the static buffers, all on the device;
        returns the final hidden states."""
        batch = ForwardBatch(
            input_ids=self.input_ids[:size],
            positions=self.positions[:size],
            out_cache_loc=self.out_cache_loc[:size],
            req_pool_indices=[self.pad_row] * size,  # host lists: never read on this path
            extend_lens=[1] * size,
            seq_lens=[1] * size,
            logit_rows=self.rows[:size],
            request_lens=self.request_lens[:, :size],
        )
        self.backend.init_decode_graph_metadata(batch, self.kv_indices)
        return self.model(batch, self.backend)

    def _capture_all(self) -> None:
        start = time.perf_counter()
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        for size in reversed(self.sizes):  # largest first: the others fit in its memory
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # compiles the Triton kernels outside the capture
                    self._step(size)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                self.outputs[size] = self._step(size)
            self.graphs[size] = graph
        torch.cuda.synchronize()
        logger.info(
            "captured %d decode CUDA graphs (batch sizes up to %d) in %.1fs",
            len(self.graphs),
            self.max_bs,
            time.perf_counter() - start,
        )
