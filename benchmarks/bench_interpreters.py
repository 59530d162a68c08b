"""The same grammar compiles under two Python interpreters, in alternating pairs: which CPython
build to run radixgen on (README, "Which Python"). Each pass compiles every schema of a
MaskBench set (compile plus first mask, no masks between compiles, the Llama-3 tokenizer unless
told) in a fresh process of one interpreter, each with the project's packages installed (a
virtual environment's python). The machine's speed drifts by tens of percent within minutes,
so the figure to read is the ratio within each pair; ends with one JSON line.

    python benchmarks/bench_interpreters.py --python A/bin/python --python B/bin/python \\
        [--data ../shared/data/maskbench-more] [--limit 1500] [--pairs 5] [--tokenizer llama3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_pass(data: str, limit: int, tokenizer: str) -> dict:
    """One pass in this process: the compile times of every schema that compiles."""
    sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    from bench_grammar import Radixgen, selected_files, tokenizers

    found = tokenizers()
    if tokenizer not in found:
        sys.exit(f"no {tokenizer} tokenizer here (pip install -e '.[bench]')")
    engine = Radixgen(found[tokenizer])
    times = []
    for _, spec in selected_files(data, limit):
        start = time.perf_counter()
        try:
            engine.compile(spec["schema"])
        except Exception:  # noqa: BLE001 - a schema that does not compile is left out
            continue
        times.append(time.perf_counter() - start)
    return {
        "python": sys.version.split()[0],
        "compiled": len(times),
        "sum_s": round(sum(times), 3),
        "p50_ms": round(float(np.percentile(times, 50)) * 1e3, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", help="an interpreter (give two)")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-more"))
    ap.add_argument("--limit", type=int, default=1500)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(compile_pass(args.data, args.limit, args.tokenizer)))
        return
    if not args.python or len(args.python) != 2:
        ap.error("give two interpreters with --python")
    a, b = args.python  # by role, not by path: the same interpreter twice is an A/A check
    child = ["--child", "--data", args.data, "--limit", str(args.limit)]
    child += ["--tokenizer", args.tokenizer]
    pairs = []
    for i in range(args.pairs):
        got = {}
        for role in ("a", "b") if i % 2 == 0 else ("b", "a"):  # who goes first alternates
            py = a if role == "a" else b
            out = subprocess.run([py, __file__, *child], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{py} failed:\n{out.stderr[-2000:]}")
            got[role] = json.loads(out.stdout.strip().splitlines()[-1])
        ratio = got["b"]["sum_s"] / got["a"]["sum_s"]
        pairs.append({**got, "sum_ratio_b_over_a": round(ratio, 3)})
        print(
            f"pair {i + 1}: "
            + " | ".join(
                f"{role.upper()} {got[role]['python']} sum {got[role]['sum_s']:.2f} s"
                f" p50 {got[role]['p50_ms']:.3f} ms"
                for role in ("a", "b")
            )
            + f" | B/A {ratio:.3f}"
        )
    ratios = sorted(p["sum_ratio_b_over_a"] for p in pairs)
    print(f"B/A compile time, per pair: {ratios}")
    print(json.dumps({"benchmark": "interpreters", "a": a, "b": b, "pairs": pairs}))


if __name__ == "__main__":
    main()
