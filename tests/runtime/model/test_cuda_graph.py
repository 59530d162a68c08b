"""Decode steps through the CUDA-graph buffers (runtime/model/cuda_graph.py): the padded
static-buffer step must give the eager step's logits and leave every real request's KV as the
eager step leaves it, across batches that grow and shrink between buckets. On the CPU the
static step runs eagerly (Triton's interpreter); on a GPU (benchmarks/gpu_check.sh) the graphs
are captured and replayed."""

import pytest
import torch

from runtime.model.cuda_graph import DecodeGraphs, graph_batch_sizes
from tests.runtime.conftest import make_tiny_model, tokenizer_folder
from tests.runtime.model.test_model_executor import DirectRunner


def test_batch_size_buckets():
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(5) == [1, 2, 4, 5]
    assert graph_batch_sizes(12) == [1, 2, 4, 8, 12]
    sizes = graph_batch_sizes(160)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 160 and len(sizes) == 23


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("graph"))
    return make_tiny_model(folder, tokenizer_folder(), "llama", seed=3)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "bfloat16", "fp8_e4m3"])
def test_padded_static_decode_matches_the_eager_step(tiny_folder, kv_cache_dtype):
    options = dict(
        backend="triton",
        max_total_tokens=400,
        kv_cache_dtype=kv_cache_dtype,
        disable_cuda_graph=True,  # the graphs are made here, with 8 as the largest bucket
    )
    eager, graphed = DirectRunner(tiny_folder, **options), DirectRunner(tiny_folder, **options)
    capture = torch.cuda.is_available()  # on a GPU the graphs are captured and replayed
    graphs = DecodeGraphs(graphed.runner, 8, capture=capture)
    assert len(graphs.graphs) == (4 if capture else 0)
    graphed.runner.decode_graphs = graphs
    assert graphs.sizes == [1, 2, 4, 8]
    gen = torch.Generator().manual_seed(0)
    prompts = {
        f"r{i}": torch.randint(3, 40000, (int(n),), generator=gen).tolist()
        for i, n in enumerate(torch.randint(2, 30, (7,), generator=gen))
    }
    for runner in (eager, graphed):  # the prompts, eagerly (extends never use the graphs)
        runner.forward([(name, ids, 0) for name, ids in prompts.items()])
    lengths = {name: len(ids) for name, ids in prompts.items()}
    # 7 requests (bucket 8), then 3 (bucket 4: rows 3..7 hold the last step's requests), 5, 1
    steps = [list(prompts), ["r1", "r4", "r6"], ["r0", "r2", "r3", "r5", "r6"], ["r4"]]
    for step, names in enumerate(steps):
        chunks = [(name, [100 + step], lengths[name]) for name in names]
        want = torch.cat(eager.forward(chunks))
        got = torch.cat(graphed.forward(chunks))
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)
        for name in names:
            lengths[name] += 1
    # every real request's K/V (slot numbers differ between the runners, values must not)
    for name, n in lengths.items():
        for layer in range(2):
            a = _kv(eager, name, n, layer)
            b = _kv(graphed, name, n, layer)
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5, msg=f"{name} {layer}")
    assert graphs.pad_row not in graphed.rows.values()


def _kv(direct: DirectRunner, name: str, n: int, layer: int) -> torch.Tensor:
    runner = direct.runner
    slots = runner.req_to_token_pool.req_to_token[direct.rows[name], :n].long()
    pool = runner.kv_pool
    return torch.stack([pool.k_buffers[layer][slots], pool.v_buffers[layer][slots]]).float()
