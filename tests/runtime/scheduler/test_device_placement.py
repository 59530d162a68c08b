"""Every tensor a scheduler step hands to the model, the attention backend and the sampler lives
on the runner's device, and only the chosen ids and logprobs come back from it.

CI has no GPU, so the runner is put on PyTorch's `meta` device (shapes without data) and every
torch op of the steps runs under a dispatch mode that fails any op mixing meta tensors with
host tensors: on CUDA the same op would fail or copy behind the scheduler's back. A copy
from the device to the host brings back zeros (meta tensors hold no data), so the steps run on:
every request samples token 0 until its length is reached.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from runtime.sampling.params import SamplingParams
from runtime.scheduler.req import Req
from runtime.scheduler.scheduler import Scheduler
from runtime.server_args import ServerArgs
from tests.runtime.conftest import make_tiny_model, tokenizer_folder

aten = torch.ops.aten
VOCAB = 49152


class DeviceGuard(TorchDispatchMode):
    """Records ops that mix meta and host tensors (0-dim host tensors are scalars, which CUDA
    accepts too), reads of a device scalar (a sync) and the copies in each direction."""

    def __init__(self):
        super().__init__()
        self.mixed: list[str] = []
        self.scalar_reads = 0
        self.to_device = 0
        self.to_host: list[int] = []  # elements of each copy back

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_device = any(t.is_meta for t in tensors)
        if func is aten._local_scalar_dense.default and on_device:
            self.scalar_reads += 1
            return 0
        if func is aten._to_copy.default:
            src, dst = args[0], kwargs.get("device") or args[0].device
            if src.is_meta and dst.type == "cpu":
                self.to_host.append(src.numel())
                return torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype)
            self.to_device += not src.is_meta and dst.type == "meta"
            return func(*args, **kwargs)
        host = [tuple(t.shape) for t in tensors if not t.is_meta and t.dim() > 0]
        if on_device and host:
            self.mixed.append(f"{func} with host tensors of shapes {host}")
            raise AssertionError(self.mixed[-1])
        return func(*args, **kwargs)


class AllowTokens:
    """A stand-in grammar matcher: tokens 0-63 allowed, every token accepted."""

    def fill_next_token_bitmask(self, bitmask, row):
        bitmask[row].zero_()
        bitmask[row, :2] = -1

    def accept_token(self, token):
        return True

    def is_terminated(self):
        return False


@pytest.fixture(scope="module")
def meta_scheduler(tmp_path_factory, smollm2_folder):
    folder = make_tiny_model(str(tmp_path_factory.mktemp("tiny")), smollm2_folder, "llama")
    args = ServerArgs(
        model_path=folder,
        dtype="float32",
        attention_backend="torch",
        max_total_tokens=1024,
        chunked_prefill_size=16,
        disable_jump_forward=True,
    )
    args.device = "meta"  # not a device users choose, hence set past validation
    scheduler = Scheduler(args)
    assert scheduler.runner.model.norm.weight.is_meta
    return scheduler


def _req(rid, prompt, **params):
    return Req(rid, prompt, SamplingParams(max_new_tokens=3, **params))


def test_steps_keep_every_tensor_on_the_runner_device(meta_scheduler):
    s = meta_scheduler
    shared = list(range(100, 140))
    reqs = [
        # prompt and output logprobs, greedy; its prompt is prefilled in 16-token chunks
        Req("logprobs", shared, SamplingParams(max_new_tokens=3, temperature=0), True, 0, 2),
        _req(
            "sampled",
            list(range(500, 520)),
            temperature=0.8,
            top_p=0.9,
            top_k=20,
            min_p=0.05,
            frequency_penalty=0.5,
            presence_penalty=0.2,
            repetition_penalty=1.3,
            logit_bias={"7": 5.0, 9: -2.0},
            min_new_tokens=2,
        ),
        _req("grammar", list(range(700, 712)), temperature=0),
    ]
    reqs[2].grammar = AllowTokens()
    late = _req("late", shared + [9, 8, 7], temperature=0.7)  # reuses the cached prefix
    for req in reqs:
        s.add_request(req)
    guards = []
    while s.has_work():
        guard = DeviceGuard()
        with guard:
            s.step()
        guards.append(guard)
        if len(guards) == 3:
            s.add_request(late)
            reqs.append(late)
    for req in reqs:
        assert req.finished_reason.type == "length", (req.rid, req.finished_reason)
        assert req.output_ids == [0, 0, 0]
    assert late.cached_tokens > 0  # an extend over a cached prefix ran too
    assert [m for g in guards for m in g.mixed] == []
    assert sum(g.scalar_reads for g in guards) == 0  # no hidden syncs
    assert max(n for g in guards for n in g.to_host) < VOCAB  # no logits come back
    # host-built arrays go over in a few copies per step, not one per field or per request:
    # a decode step sends its batch and its sampling parameters, nothing else
    assert max(g.to_device for g in guards) <= 5
    assert guards[-1].to_device == 2


def test_triton_backend_metadata_is_built_on_the_device(meta_scheduler, monkeypatch):
    """The GPU backend's per-step index tensors (its kernels cannot run on meta, so the one
    that gathers the slot indices is checked for its arguments' devices instead): built from
    the batch's own device tensors, with no copy and no sync."""
    from runtime.model.attention import triton_backend
    from runtime.model.attention.base import ForwardBatch
    from runtime.model.attention.triton_backend import TritonAttentionBackend

    launches = []

    def fill_kv_indices(*tensors):
        assert all(t.is_meta for t in tensors), [t.device for t in tensors]
        launches.append(len(tensors))

    monkeypatch.setattr(triton_backend, "fill_kv_indices", fill_kv_indices)

    runner = meta_scheduler.runner
    backend = TritonAttentionBackend(runner.req_to_token_pool, runner.kv_pool)
    for requests in ([(0, 1, 6), (1, 1, 4)], [(0, 2, 6), (1, 1, 4)]):  # decodes; an extend
        tokens = sum(n for _, n, _ in requests)
        positions = [p for _, n, seq in requests for p in range(seq - n, seq)]
        slots = runner.kv_pool.alloc(tokens)
        batch = ForwardBatch.from_host("meta", [5] * tokens, positions, slots, [0, 1], requests)
        guard = DeviceGuard()
        with guard:
            backend.init_forward_metadata(batch)
        runner.kv_pool.free(slots)
        assert (guard.mixed, guard.to_device, guard.scalar_reads) == ([], 0, 0)
        meta = batch.metadata
        assert all(t.is_meta for t in (meta.qo_indptr, meta.kv_indptr, meta.kv_indices))
        assert meta.decode_only == (tokens == len(requests))
    assert launches == [5, 5]


def test_cuda_graph_step_reads_only_device_tensors_and_never_syncs(tmp_path, monkeypatch):
    """What a CUDA graph holds (DecodeGraphs._step) and what each replay does around it
    (DecodeGraphs.run) on the meta device: no host tensor, no scalar read (a sync, which a
    capture refuses), no copy either way; the Triton kernels, which cannot run on meta, are
    checked for their arguments' devices."""
    from runtime.model.attention import triton_backend
    from runtime.model.attention.base import ForwardBatch
    from runtime.model.cuda_graph import DecodeGraphs
    from runtime.model.runner import ModelRunner

    def on_meta(*tensors, **_):
        assert all(t.is_meta for t in tensors if isinstance(t, torch.Tensor))

    monkeypatch.setattr(triton_backend, "fill_kv_indices", on_meta)
    monkeypatch.setattr(triton_backend, "decode_attention_fwd", on_meta)
    folder = make_tiny_model(str(tmp_path), tokenizer_folder(), "llama")
    args = ServerArgs(
        model_path=folder, dtype="float32", attention_backend="triton", max_total_tokens=256
    )
    args.device = "meta"
    runner = ModelRunner(args)
    graphs = DecodeGraphs(runner, 8, capture=False)
    for requests in ([(0, 1, 5), (1, 1, 9), (2, 1, 3)], [(0, 1, 6)]):  # buckets 4, then 1
        slots = runner.kv_pool.alloc(len(requests))
        positions = [seq - 1 for _, _, seq in requests]
        rows = list(range(len(requests)))
        batch = ForwardBatch.from_host(
            "meta", [7] * len(requests), positions, slots, rows, requests
        )
        assert graphs.can_run(batch)
        guard = DeviceGuard()
        with guard:
            logits = graphs.run(batch)
        assert (guard.mixed, guard.scalar_reads, guard.to_device, guard.to_host) == ([], 0, 0, [])
        assert logits.is_meta and logits.shape == (len(requests), VOCAB)


def test_overlap_forward_thread_never_waits_for_the_device(tmp_path_factory, smollm2_folder):
    """With overlap scheduling, the forward thread launches step N+1 before step N's tokens
    are on the host: N+1's pending input ids are copied on the device from N's picks, and
    nothing on that thread copies back or reads a device scalar (each would wait for the
    GPU). Landing, on the scheduling thread, reads the picks."""
    from runtime.scheduler.overlap import OverlapScheduler

    folder = make_tiny_model(str(tmp_path_factory.mktemp("tiny")), smollm2_folder, "llama")
    args = ServerArgs(
        model_path=folder, dtype="float32", attention_backend="torch", max_total_tokens=1024
    )
    args.device = "meta"
    s = OverlapScheduler(args)
    forward_guards, landing_guards = [], []
    run = s._run

    def guarded_run(*a):
        guard = DeviceGuard()
        forward_guards.append(guard)
        with guard:
            return run(*a)

    s._run = guarded_run
    reqs = [_req(f"r{i}", [10 + i, 20, 30], temperature=0) for i in range(3)]
    reqs.append(_req("sampled", [40, 41], temperature=0.7, top_p=0.9))
    for req in reqs:
        s.add_request(req)
    while s.has_work():
        guard = DeviceGuard()
        with guard:
            s.step()
        landing_guards.append(guard)
    assert [r.output_ids for r in reqs] == [[0, 0, 0]] * 4
    assert s.stats.overlapped_steps >= 2  # steps launched with pending tokens filled on device
    assert sum(g.scalar_reads + len(g.to_host) for g in forward_guards) == 0
    assert [m for g in forward_guards + landing_guards for m in g.mixed] == []
    assert sum(len(g.to_host) for g in landing_guards) > 0  # the picks, read as steps land
