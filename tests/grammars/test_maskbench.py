"""MaskBench (../shared/data/maskbench-dev): no invalid instance may ever be accepted, and the
number of passing files must not fall below the recorded one (tests/data/maskbench_dev.json)."""

import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from tests.grammars.conftest import maskbench_dir

RECORD = Path(__file__).resolve().parents[1] / "data" / "maskbench_dev.json"
_worker = {}


def _init():
    os.environ["HF_HUB_OFFLINE"] = "1"
    from grammars import GrammarCompiler
    from runtime.model.loader import load_tokenizer, resolve_model_path

    tok = load_tokenizer(resolve_model_path("smollm2"))
    _worker["tok"], _worker["gc"] = tok, GrammarCompiler(tok)


def _check(path: str) -> tuple[str, str]:
    from grammars.maskbench import check_file

    with open(path) as f:
        spec = json.load(f)
    return os.path.basename(path), check_file(_worker["gc"], _worker["tok"], spec)


def test_maskbench_dev_pass_count_and_no_invalid_accepted():
    folder = maskbench_dir()
    if folder is None:
        pytest.skip("MaskBench data not found (../shared/data/maskbench-dev)")
    paths = sorted(str(p) for p in folder.glob("*.json"))
    with ProcessPoolExecutor(max_workers=2, initializer=_init) as pool:
        results = dict(pool.map(_check, paths, chunksize=8))
    counts = {}
    for status in results.values():
        counts[status] = counts.get(status, 0) + 1
    record = json.loads(RECORD.read_text())
    wrong = sorted(n for n, s in results.items() if s == "invalidation_error")
    crashed = {n: s for n, s in results.items() if s.startswith("crash")}
    print({k: v for k, v in counts.items() if not k.startswith("crash")}, crashed)
    assert not wrong, f"invalid instances accepted in {wrong}"
    assert not crashed
    assert counts.get("pass", 0) >= record["pass"], (counts, record)
    assert len(paths) == record["files"]
