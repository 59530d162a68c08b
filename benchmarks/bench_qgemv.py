"""The quantized products of runtime/model/qgemv.c, AVX2 against AVX-512 VNNI, on SmolLM2-135M's
shapes (random weights): `int4_linear` / `int8_linear` at 1, 4 and 16 rows, the two kernels
alternating, best of --rounds. Prints a table and ends with one JSON line.

    python benchmarks/bench_qgemv.py [--threads 1] [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = {  # name: (n, k, kind)
    "qkv": (960, 576, "int4"),
    "o": (576, 576, "int4"),
    "gate_up": (3072, 576, "int4"),
    "down": (576, 1536, "int4"),
    "lm_head": (49152, 576, "int8"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    import torch

    from runtime.model import qgemv
    from runtime.model.quantization import quantize

    torch.set_num_threads(args.threads)
    lib = qgemv.load()
    if lib is None or not qgemv.avx512_vnni():
        print(json.dumps({"bench": "qgemv", "skipped": "no native kernels or no avx512_vnni"}))
        return
    torch.manual_seed(0)
    figures = {}
    for name, (n, k, kind) in SHAPES.items():
        matmul = qgemv.NativeMatmul(lib, quantize(torch.randn(n, k) * 0.05, kind))
        for rows in (1, 4, 16):
            x, best = torch.randn(rows, k), {}
            calls = max(3, int(5e7 / (n * k * max(rows, 4))))
            for r in range(args.rounds):
                for variant in ("avx2", "avx512") if r % 2 else ("avx512", "avx2"):
                    # every row count on the kernel timed, whatever AVX512_ROWS picks
                    lib.set_avx512(*(2 * [1 if variant == "avx512" else 0]))
                    matmul(x)
                    start = time.perf_counter()
                    for _ in range(calls):
                        matmul(x)
                    ms = (time.perf_counter() - start) / calls * 1e3
                    best[variant] = min(best.get(variant, ms), ms)
            figures[f"{name}/{rows}"] = best
            print(
                f"{name:>8} {rows:2} rows: AVX2 {best['avx2']:.3f} ms, VNNI {best['avx512']:.3f}"
                f" ms ({best['avx2'] / best['avx512']:.2f}x)",
                flush=True,
            )
    qgemv.use_avx512(lib, not os.environ.get("RADIXGEN_NO_AVX512"))
    print(json.dumps({"bench": "qgemv", "threads": args.threads, "ms": figures}))


if __name__ == "__main__":
    main()
