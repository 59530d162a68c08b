"""Grammar compile time on large constraints: how compile time grows with the size of an enum
(strings; mixed strings and numbers; anyOf of consts), with compile_choices, and on a large
schema (an object of many typed, described properties, about 2 MB of JSON). Each compile runs
on a fresh GrammarCompiler (no cache) with the SmolLM2 tokenizer; the time includes the first
mask. Ends with one JSON line of figures.

    python benchmarks/bench_grammar_compile.py [--sizes 5000,10000,20000,50000] [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from grammars import CompileBudget, GrammarCompiler, GrammarError, TokenizerInfo  # noqa: E402

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]


def string_values(n: int) -> list[str]:
    rng = random.Random(n)
    return [f"value-{i:06d}-{rng.choice(WORDS)}" for i in range(n)]


def mixed_values(n: int) -> list:
    rng = random.Random(n)
    out: list = []
    for i, text in enumerate(string_values(n)):
        kind = i % 4
        out.append(text if kind < 2 else rng.randint(-(10**9), 10**9) if kind == 2 else i / 7)
    return out


def large_schema(n: int = 1000) -> dict:
    """An object of n properties of assorted types with long descriptions (about 2 MB)."""
    types = [
        {"type": "string", "maxLength": 40},
        {"type": "integer", "minimum": 0, "maximum": 10_000},
        {"type": "array", "items": {"type": "number"}},
        {"enum": ["red", "green", "blue"]},
        {"type": "boolean"},
    ]
    props = {
        f"field_{i}": {**types[i % len(types)], "description": "A field of the record. " * 90}
        for i in range(n)
    }
    return {"type": "object", "properties": props, "required": [f"field_{i}" for i in range(20)]}


def timed(info: TokenizerInfo, compile_one, timeout: float) -> float | str:
    """Seconds to compile and fill the first mask on a fresh compiler, or why it failed."""
    compiler = GrammarCompiler(info)
    start = time.perf_counter()
    try:
        grammar = compile_one(compiler, CompileBudget(timeout=timeout))
        grammar.matcher().next_token_mask()
    except GrammarError as exc:
        return f"{type(exc).__name__}: {exc}"[:120]
    return round(time.perf_counter() - start, 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="5000,10000,20000,50000")
    ap.add_argument("--timeout", type=float, default=60.0, help="per compile, seconds")
    args = ap.parse_args()
    from runtime.model.loader import load_tokenizer, resolve_model_path

    info = TokenizerInfo.from_huggingface(load_tokenizer(resolve_model_path("smollm2")))
    timed(info, lambda c, b: c.compile_json_schema({"type": "string"}, budget=b), args.timeout)
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = {
        "enum_strings": lambda n: {"enum": string_values(n)},
        "enum_mixed": lambda n: {"enum": mixed_values(n)},
        "anyof_consts": lambda n: {"anyOf": [{"const": v} for v in string_values(n)]},
    }
    results: dict = {}
    for name, make in cases.items():
        for n in sizes:
            schema = make(n)
            figure = timed(
                info, lambda c, b, s=schema: c.compile_json_schema(s, budget=b), args.timeout
            )
            results[f"{name}_{n}"] = figure
            print(f"{name:14s} n={n:<6d} {figure}", flush=True)
    for n in sizes:
        choices = string_values(n)
        figure = timed(info, lambda c, b, x=choices: c.compile_choices(x, budget=b), args.timeout)
        results[f"choices_{n}"] = figure
        print(f"{'choices':14s} n={n:<6d} {figure}", flush=True)
    schema = large_schema()
    size = len(json.dumps(schema))
    figure = timed(info, lambda c, b: c.compile_json_schema(schema, budget=b), args.timeout)
    results["large_schema"] = figure
    print(f"large schema ({size / 1e6:.1f} MB, {len(schema['properties'])} properties): {figure}")
    print(json.dumps({"benchmark": "grammar_compile", "seconds": results}))


if __name__ == "__main__":
    main()
