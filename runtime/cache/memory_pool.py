"""KV memory: a per-request table of slot indices and per-layer K/V buffers with a slot allocator.

Slot 0 of the KV pool is a zeroed padding slot that is never handed out, so padded gathers
read finite values.

The pool may store K/V in bf16 beside a float32 model (`--kv-cache-dtype bfloat16`: half the
bytes, values rounded to bf16) or in an fp8 format (`--kv-cache-dtype fp8_e4m3`): a value x
is kept as x / scale rounded to fp8 (clamped to the format's range) and read back as
stored * scale, with one scale for K and one for V. Readers upcast with `load`; kernels take
the scales as arguments.
"""

from __future__ import annotations

import torch

FP8_KV_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """The dtype K/V are stored in: `auto` keeps the model's, `bfloat16` stores two bytes per
    value (half of a float32 model's), `fp8_e4m3` / `fp8_e5m2` one."""
    if name == "auto":
        return model_dtype
    return torch.bfloat16 if name == "bfloat16" else FP8_KV_DTYPES[name]


class ReqToTokenPool:
    """[max_requests, max_context] int32 table: row r lists the KV slot of each token of request r."""

    def __init__(self, max_requests: int, max_context: int, device: str = "cpu"):
        self.max_context = max_context
        self.req_to_token = torch.zeros(
            (max_requests, max_context), dtype=torch.int32, device=device
        )
        self.free_rows = list(range(max_requests))
        self.size = max_requests

    def alloc(self) -> int | None:
        return self.free_rows.pop() if self.free_rows else None

    def free(self, row: int) -> None:
        self.free_rows.append(row)

    def available(self) -> int:
        return len(self.free_rows)


_MERGE_EVERY = 256  # frees kept apart before they join the free list


class TokenToKVPool:
    """Per-layer K and V buffers of shape [num_slots + 1, kv_heads, head_dim], page size 1.

    The memory is laid out head-major ([kv_heads, slots, head_dim], `k_heads`/`v_heads`) and
    `k_buffers`/`v_buffers` are [slots, kv_heads, head_dim] views of it: gathering a request's
    slots then yields contiguous per-head blocks, which CPU matmuls need to run fast.
    """

    def __init__(
        self,
        num_slots: int,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str = "cpu",
        k_scale: float = 1.0,
        v_scale: float = 1.0,
    ):
        self.size = num_slots
        self.dtype = dtype
        self.fp8 = dtype in FP8_KV_DTYPES.values()
        self.k_scale, self.v_scale = (k_scale, v_scale) if self.fp8 else (1.0, 1.0)
        shape = (kv_heads, num_slots + 1, head_dim)
        self.k_heads = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_heads = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        for buf in self.k_heads + self.v_heads:
            buf[:, 0].zero_()
        self.k_buffers = [buf.transpose(0, 1) for buf in self.k_heads]
        self.v_buffers = [buf.transpose(0, 1) for buf in self.v_heads]
        self.device = device
        self.clear()

    def clear(self) -> None:
        self._free = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)
        # slots given back since the last merge, in order: appended to `_free` only when an
        # alloc needs them (a merge copies the whole free list, ~1 ms for 100k slots; frees
        # come several a step). Slots are taken in the same order as with a merge per free.
        self._freed: list[torch.Tensor] = []
        self._freed_count = 0

    @property
    def free_slots(self) -> torch.Tensor:
        """Every free slot, in the order alloc takes them."""
        self._merge()
        return self._free

    def _merge(self) -> None:
        if self._freed:
            self._free = torch.cat([self._free, *self._freed])
            self._freed, self._freed_count = [], 0

    def available(self) -> int:
        return int(self._free.numel()) + self._freed_count

    def alloc(self, n: int) -> torch.Tensor | None:
        """Take n free slots, or return None (and take nothing) when fewer are free."""
        if n > self._free.numel():
            if n > self.available():
                return None
            self._merge()
        out, self._free = self._free[:n], self._free[n:]
        return out

    def free(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self._freed.append(slots.to(torch.int64))
            self._freed_count += slots.numel()
            if len(self._freed) >= _MERGE_EVERY:  # a bounded list, whatever alloc takes
                self._merge()

    def set_kv(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k_buffers[layer][loc] = self.store(k, self.k_scale)
        self.v_buffers[layer][loc] = self.store(v, self.v_scale)

    def store(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        """x as this pool keeps it: unchanged, or divided by `scale` and rounded to fp8 within
        the format's finite range (a cast alone would turn larger values into NaN)."""
        if not self.fp8:
            return x if x.dtype == self.dtype else x.to(self.dtype)
        limit = torch.finfo(self.dtype).max
        return (x.float() / scale).clamp_(-limit, limit).to(self.dtype)

    def load(self, stored: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
        """Values gathered from this pool as real values in `dtype`."""
        if not self.fp8:
            return stored if stored.dtype == dtype else stored.to(dtype)
        out = stored.to(dtype)
        return out if scale == 1.0 else out.mul_(scale)
