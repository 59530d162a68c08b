"""The grammar kernels' one-time build (numba's: over a minute on a fresh install, before its
disk cache exists) does not count against a request's --grammar-compile-timeout: the limit
runs from the request's arrival or from when the kernels became ready, whichever is later."""

import re
import time

import pytest

import grammars
from runtime import Engine

SLOW_BUILD_S = 2.0  # a cold kernel build, made to last longer than the compile timeout
TIMEOUT_S = 1.0
PARAMS = {"regex": "[a-z]{3,6}", "max_new_tokens": 8, "temperature": 0}


@pytest.fixture
def engine(tmp_path, smollm2_folder, monkeypatch):
    from tests.runtime.conftest import make_tiny_model

    builds = []
    real_warm_up = grammars.warm_up

    def cold_warm_up():
        builds.append(time.monotonic())
        time.sleep(SLOW_BUILD_S)
        real_warm_up()

    monkeypatch.setattr(grammars, "warm_up", cold_warm_up)
    folder = make_tiny_model(str(tmp_path), smollm2_folder, "llama")
    engine = Engine(
        model_path=folder,
        dtype="float32",
        log_level="error",
        max_total_tokens=512,
        grammar_compile_timeout=TIMEOUT_S,
    )
    engine.builds = builds
    yield engine
    engine.shutdown()


def test_first_constrained_request_waits_for_the_kernels_not_the_timeout(engine):
    out = engine.generate(input_ids=[5, 6, 7], sampling_params=PARAMS)
    assert re.fullmatch("[a-z]{3,6}", out["text"])
    assert len(engine.builds) == 1  # built on the first compile, once
    engine.generate(input_ids=[8, 9], sampling_params=PARAMS)
    assert len(engine.builds) == 1


def test_request_arriving_during_the_warm_up_gets_its_full_timeout(engine):
    engine.scheduler.warm_up_grammars()  # what a server does at start, in the background
    time.sleep(0.2)
    out = engine.generate(input_ids=[5, 6, 7], sampling_params=PARAMS)
    assert re.fullmatch("[a-z]{3,6}", out["text"])
    assert len(engine.builds) == 1


def test_a_failing_kernel_build_does_not_fail_the_requests(tmp_path, smollm2_folder, monkeypatch):
    """If building the kernels ahead fails, compiles build what they need as they go."""
    from tests.runtime.conftest import make_tiny_model

    def broken_warm_up():
        raise RuntimeError("no disk for the kernel cache")

    monkeypatch.setattr(grammars, "warm_up", broken_warm_up)
    folder = make_tiny_model(str(tmp_path), smollm2_folder, "llama")
    engine = Engine(model_path=folder, dtype="float32", log_level="critical", max_total_tokens=512)
    try:
        for prompt in ([5, 6, 7], [8, 9]):
            out = engine.generate(input_ids=prompt, sampling_params=PARAMS)
            assert re.fullmatch("[a-z]{3,6}", out["text"])
    finally:
        engine.shutdown()
