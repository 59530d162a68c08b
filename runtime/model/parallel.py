"""Tensor parallelism: one model's ranks, their collectives, and the step plan rank 0 sends.

A model served with `--tp-size N` runs in N processes (ranks) joined in one torch.distributed
group (gloo on the CPU, NCCL on CUDA). Rank 0 is the scheduler: it owns the radix cache, the
slot allocator and sampling. Before each forward it broadcasts the batch (token ids, positions,
KV slots) and the parts of its request-to-slot table the other ranks have not seen; every rank
then runs the same forward on its shard of the heads and MLP columns, all-reducing after the
row-parallel layers, and rank 0 gathers the vocabulary-sharded logits. Slot indices are the
same on every rank; each rank's KV pool holds only its own KV heads.

The group's collectives wait without a deadline: an idle server sends nothing for hours. A rank
that dies closes its connections, and the others' next collective raises at once
(TensorParallelError); a rank never continues after a failed collective.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from dataclasses import dataclass

import torch

from runtime.model.config import ModelConfig

logger = logging.getLogger(__name__)

_WAIT = datetime.timedelta(days=3650)  # see the module docstring
_STOP, _FORWARD = 0, 1


class TensorParallelError(RuntimeError):
    """A collective of the tensor-parallel group failed (a rank died): the group is unusable."""


@dataclass(frozen=True)
class ParallelConfig:
    """Where this process sits: rank `tp_rank` of `tp_size`, joining at `init_method`
    (tcp://host:port); `local_ranks` share this machine (their CPU threads are split)."""

    tp_rank: int = 0
    tp_size: int = 1
    init_method: str | None = None
    local_ranks: int = 1


def free_init_method(host: str = "127.0.0.1") -> str:
    """A tcp:// address on this machine with a port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return f"tcp://{host}:{sock.getsockname()[1]}"


def group_init_method(dist_init_addr: str | None, group: int = 0) -> str:
    """Where the ranks of group `group` (a --dp-size worker) meet: tcp:// of --dist-init-addr's
    host with its port moved by `group`, or else a free port on this machine."""
    if dist_init_addr is None:
        return free_init_method()
    host, _, port = dist_init_addr.rpartition(":")
    return f"tcp://{host}:{int(port) + group}"


def check_shapes(cfg: ModelConfig, tp_size: int) -> None:
    """ValueError unless the model splits over `tp_size` ranks (see head_shard)."""
    if tp_size == 1:
        return
    kv, group = cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads
    problems = []
    if kv < tp_size and (tp_size % kv or group % (tp_size // kv)):
        problems.append(
            f"{kv} KV heads of {group} attention heads each over {tp_size} ranks (fewer KV "
            "heads than ranks must divide the ranks, and the ranks sharing one must divide "
            "its attention heads)"
        )
    if cfg.intermediate_size % tp_size:
        problems.append(f"an MLP of {cfg.intermediate_size} columns")
    if problems:
        raise ValueError(f"tp_size {tp_size}: the model cannot be split: {'; '.join(problems)}")


@dataclass(frozen=True)
class HeadShard:
    """The attention heads one rank holds: q heads [q_start, q_start + q_heads) and the KV
    heads [kv_start, kv_start + kv_heads) they read, `q_heads // kv_heads` per KV head."""

    q_start: int
    q_heads: int
    kv_start: int
    kv_heads: int


def head_shard(cfg: ModelConfig, tp_rank: int, tp_size: int) -> HeadShard:
    """With at least as many KV heads as ranks, each rank takes a contiguous run of whole KV
    groups, as even as the count allows (SmolLM2's 3 KV heads over 2 ranks: 2 and 1); with
    fewer, each KV head is replicated on tp_size / kv_heads ranks that split its group."""
    kv, group = cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads
    if kv >= tp_size:
        first, last = tp_rank * kv // tp_size, (tp_rank + 1) * kv // tp_size
        return HeadShard(first * group, (last - first) * group, first, last - first)
    sharing = tp_size // kv
    per_rank = group // sharing
    return HeadShard(tp_rank * per_rank, per_rank, tp_rank // sharing, 1)


def leave_group() -> None:
    """Destroy this process's tensor-parallel group, if it joined one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class TensorParallel:
    """This process's place in the group and the collectives the model calls."""

    def __init__(self, config: ParallelConfig, device: str):
        self.config = config
        self.rank, self.size = config.tp_rank, config.tp_size
        self.device = device
        self._sent: torch.Tensor | None = None  # rank 0: the table rows the others hold
        if self.size > 1 and device == "cuda":  # before the weights load: one GPU per rank
            torch.cuda.set_device(self.rank % config.local_ranks)

    def connect(self) -> None:
        """Join the group (blocks until every rank has joined)."""
        if self.size == 1:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            raise RuntimeError(
                "this process is already a tensor-parallel rank (one tp_size > 1 Engine per "
                "process at a time: shut the other down first)"
            )
        backend = "nccl" if self.device == "cuda" else "gloo"
        logger.info(
            "tensor-parallel rank %d of %d joining at %s (%s)",
            self.rank,
            self.size,
            self.config.init_method,
            backend,
        )
        dist.init_process_group(
            backend,
            init_method=self.config.init_method,
            rank=self.rank,
            world_size=self.size,
            timeout=_WAIT,
        )

    def close(self) -> None:
        """Leave the group (its collectives are never called again)."""
        if self.size > 1:
            leave_group()

    @property
    def enabled(self) -> bool:
        return self.size > 1

    def _run(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise TensorParallelError(
                f"tensor-parallel {what} failed on rank {self.rank} of {self.size} "
                f"(another rank died?): {exc}"
            ) from exc

    # ---- collectives the layers call ---------------------------------------------------
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over the ranks, in place."""
        if self.size > 1:
            import torch.distributed as dist

            self._run("all-reduce", dist.all_reduce, x)
        return x

    def min_int(self, value: int) -> int:
        """The smallest of every rank's `value` (they must agree on the KV pool's size)."""
        if self.size == 1:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self._comm_device)
        import torch.distributed as dist

        self._run("all-reduce", dist.all_reduce, t, op=dist.ReduceOp.MIN)
        return int(t.item())

    def gather_columns(self, local: torch.Tensor, total: int) -> torch.Tensor | None:
        """Rank 0: the ranks' column blocks of `local` side by side, cut to `total` columns;
        the other ranks: None."""
        if self.size == 1:
            return local
        import torch.distributed as dist

        local = local.contiguous()
        parts = [torch.empty_like(local) for _ in range(self.size)] if self.rank == 0 else None
        self._run("gather", dist.gather, local, parts, dst=0)
        if self.rank != 0:
            return None
        return torch.cat(parts, dim=-1)[..., :total]

    @property
    def _comm_device(self) -> str:
        return "cuda" if self.device == "cuda" else "cpu"

    # ---- the step plan -------------------------------------------------------------------
    def _broadcast(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        t = t.to(self._comm_device)
        self._run("broadcast", dist.broadcast, t, src=0)
        return t.cpu()

    def send_step(self, batch, table: torch.Tensor) -> None:
        """Rank 0, before its forward: the batch and the slot-table entries that changed."""
        if self._sent is None:
            self._sent = torch.full(tuple(table.shape), -1, dtype=torch.int32)
        rows = torch.tensor(batch.req_pool_indices, dtype=torch.long)
        seqs = torch.tensor(batch.seq_lens, dtype=torch.long)
        width = int(seqs.max())
        now = table[rows.to(table.device), :width].cpu()
        stale = (now != self._sent[rows, :width]) & (torch.arange(width)[None, :] < seqs[:, None])
        # each row re-sends from its first changed entry to its length
        first = torch.where(stale.any(1), stale.int().argmax(1), seqs)
        pieces = []
        for i, row in enumerate(batch.req_pool_indices):
            start, end = int(first[i]), int(seqs[i])
            pieces.append(now[i, start:end].long())
            self._sent[row, start:end] = now[i, start:end]
        payload = torch.cat(
            [
                batch.input_ids.long().cpu(),
                batch.positions.long().cpu(),
                batch.out_cache_loc.long().cpu(),
                rows,
                torch.tensor(batch.extend_lens, dtype=torch.long),
                seqs,
                first,
                batch.logit_rows.long().cpu(),
                *pieces,
            ]
        )
        counts = [_FORWARD, batch.num_tokens, len(rows), int(batch.logit_rows.numel())]
        self._broadcast(torch.tensor([*counts, payload.numel()], dtype=torch.long))
        self._broadcast(payload)

    def send_stop(self) -> None:
        """Rank 0: tell the other ranks to leave their loop."""
        if self.size > 1:
            self._broadcast(torch.tensor([_STOP, 0, 0, 0, 0], dtype=torch.long))

    def recv_step(self, table: torch.Tensor, forward_batch_cls):
        """A rank > 0: the next batch (its slot-table rows updated in `table`), or None to stop."""
        head = self._broadcast(torch.zeros(5, dtype=torch.long))
        kind, tokens, reqs, logit_rows, size = (int(v) for v in head)
        if kind == _STOP:
            return None
        data = self._broadcast(torch.zeros(size, dtype=torch.long))
        cuts = [tokens] * 3 + [reqs] * 4 + [logit_rows]
        fields = list(torch.split(data[: sum(cuts)], cuts))
        input_ids, positions, loc, rows, ext, seqs, first, logit = fields
        offset = sum(cuts)
        for row, start, end in zip(rows.tolist(), first.tolist(), seqs.tolist()):
            n = end - start
            table[row, start:end] = data[offset : offset + n].to(table.dtype)
            offset += n
        device = table.device
        return forward_batch_cls(
            input_ids=input_ids.to(device),
            positions=positions.to(device),
            out_cache_loc=loc.to(device),
            req_pool_indices=rows.tolist(),
            extend_lens=ext.tolist(),
            seq_lens=seqs.tolist(),
            logit_rows=logit.to(device),
        )


def cpu_threads_per_rank(local_ranks: int) -> int:
    """Threads for each of `local_ranks` ranks sharing this machine's cores."""
    return max(1, (os.cpu_count() or 1) // local_ranks)
