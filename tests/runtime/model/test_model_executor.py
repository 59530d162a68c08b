"""Our executor's logits against Hugging Face transformers on the same weights (fp32)."""

import pytest
import torch

from runtime.model.attention.base import ForwardBatch
from runtime.model.runner import ModelRunner
from runtime.server_args import ServerArgs

TOL = 1e-3


class DirectRunner:
    """Drives ModelRunner.forward with hand-built ragged batches; returns logits of every token."""

    def __init__(self, folder: str, backend: str = "torch", **overrides):
        options = {"dtype": "float32", "max_total_tokens": 4096, "attention_backend": backend}
        args = ServerArgs(model_path=folder, **{**options, **overrides})
        self.runner = ModelRunner(args)
        self.rows = {}

    def forward(self, chunks: list[tuple[str, list[int], int]]) -> list[torch.Tensor]:
        """chunks: (request name, new tokens, position of the first new token)."""
        table = self.runner.req_to_token_pool.req_to_token
        total = sum(len(toks) for _, toks, _ in chunks)
        slots = self.runner.kv_pool.alloc(total)
        ids, pos, rows, off = [], [], [], 0
        for name, toks, start in chunks:
            if name not in self.rows:
                self.rows[name] = self.runner.req_to_token_pool.alloc()
            row = self.rows[name]
            table[row, start : start + len(toks)] = slots[off : off + len(toks)].int()
            ids += toks
            pos += range(start, start + len(toks))
            rows.append(row)
            off += len(toks)
        device = self.runner.device
        batch = ForwardBatch(
            input_ids=torch.tensor(ids, device=device),
            positions=torch.tensor(pos, device=device),
            out_cache_loc=slots,
            req_pool_indices=rows,
            extend_lens=[len(t) for _, t, _ in chunks],
            seq_lens=[s + len(t) for _, t, s in chunks],
            logit_rows=torch.arange(total, device=device),
        )
        logits = self.runner.forward(batch)
        return list(logits.split([len(t) for _, t, _ in chunks]))


def hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def load_hf(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def prompts(n: int, length_range=(5, 60), seed=0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(*length_range, (1,), generator=g))
        out.append(torch.randint(20, 49152, (length,), generator=g).tolist())
    return out


def check_model(folder: str, backend: str = "torch"):
    hf = load_hf(folder)
    a, b, c = prompts(3)
    ours = DirectRunner(folder, backend)
    ref = {name: hf_logits(hf, p) for name, p in zip("abc", (a, b, c))}

    # prefill of a whole prompt
    (la,) = ours.forward([("a", a, 0)])
    assert (la - ref["a"]).abs().max() < TOL

    # b: prefill a first chunk; c: first token only
    half = len(b) // 2
    lb, lc = ours.forward([("b", b[:half], 0), ("c", c[:1], 0)])
    assert (lb - ref["b"][:half]).abs().max() < TOL
    assert (lc - ref["c"][:1]).abs().max() < TOL
    # one ragged step: b extends over its cached half, c decodes one token
    lb, lc = ours.forward([("b", b[half:], half), ("c", c[1:2], 1)])
    assert (lb - ref["b"][half:]).abs().max() < TOL
    assert (lc - ref["c"][1:2]).abs().max() < TOL
    # step-by-step decode of the rest of c, batched with nothing else
    for i in range(2, len(c)):
        (lc,) = ours.forward([("c", [c[i]], i)])
        assert (lc[0] - ref["c"][i]).abs().max() < TOL, f"decode step {i}"
    # one ragged step of a short extend over a cached prefix (one query row a token in the
    # torch backend), a long fresh extend, a short fresh one and a decode
    d, e, f = prompts(3, length_range=(30, 40), seed=1)
    ours.forward([("d", d[:24], 0)])
    ld, le, lf, la = ours.forward(
        [("d", d[24:29], 24), ("e", e, 0), ("f", f[:3], 0), ("a", [5], len(a))]
    )
    assert (ld - hf_logits(hf, d[:29])[24:]).abs().max() < TOL
    assert (le - hf_logits(hf, e)).abs().max() < TOL
    assert (lf - hf_logits(hf, f[:3])).abs().max() < TOL
    assert (la[0] - hf_logits(hf, a + [5])[-1]).abs().max() < TOL
    # a batched decode step over requests of different lengths (padding is masked)
    extra = [7, 8, 9]
    a = a + [5]
    outs = ours.forward([(n, [t], len(p)) for n, p, t in zip("abc", (a, b, c), extra)])
    for out, p, t in zip(outs, (a, b, c), extra):
        assert (out[0] - hf_logits(hf, p + [t])[-1]).abs().max() < TOL


def test_tiny_models_match_transformers(tiny_model):
    check_model(tiny_model)


def test_smollm2_matches_transformers(smollm2_folder):
    check_model(smollm2_folder)


def test_unknown_architecture_names_model_type(tmp_path):
    import json

    from runtime.model.config import ModelConfig, UnsupportedModelError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_neox"}))
    with pytest.raises(UnsupportedModelError, match="gpt_neox"):
        ModelConfig.from_folder(str(tmp_path))
