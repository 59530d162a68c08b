"""The cost of uniqueItems over free strings (checked by the matcher's scanner): time per step
(fill the mask, accept the token) of one document, a list of `--items` distinct strings, under
the same schema with and without `uniqueItems`, SmolLM2 tokenizer; best of `--runs` passes per
step, on one grammar (masks memoised after the first pass, as in a long generation). Ends with
one JSON line of figures.

    python benchmarks/bench_unique_items.py [--items 40] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from grammars import GrammarCompiler  # noqa: E402
from runtime.model.loader import load_tokenizer, resolve_model_path  # noqa: E402


def step_times(compiler, tok, schema: dict, text: str, runs: int) -> np.ndarray:
    grammar = compiler.compile_json_schema(schema)
    ids = tok.encode(text, add_special_tokens=False)
    bitmask = np.zeros(compiler.vocab.words, np.int32)
    best = np.full(len(ids), np.inf)
    for _ in range(runs):
        matcher = grammar.matcher()
        for i, token in enumerate(ids):
            t0 = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            accepted = matcher.accept_token(token)
            best[i] = min(best[i], time.perf_counter() - t0)
            assert accepted, (i, token)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    tok = load_tokenizer(resolve_model_path("smollm2"))
    compiler = GrammarCompiler(tok)
    text = json.dumps({"tags": [f"tag number {i} with words" for i in range(args.items)]})
    figures = {}
    for unique in (False, True):
        schema = {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": unique}
            },
        }
        t = step_times(compiler, tok, schema, text, args.runs)
        name = "unique" if unique else "plain"
        figures[name] = {
            "steps": len(t),
            "step_us_p50": round(float(np.percentile(t, 50)), 1),
            "step_us_p95": round(float(np.percentile(t, 95)), 1),
            "total_ms": round(float(t.sum()) / 1e3, 2),
        }
        print(f"{name:7s} " + " ".join(f"{k}={v}" for k, v in figures[name].items()))
    ratio = figures["unique"]["total_ms"] / figures["plain"]["total_ms"]
    print(json.dumps({"benchmark": "unique_items", "items": args.items, **figures, "ratio": ratio}))


if __name__ == "__main__":
    main()
