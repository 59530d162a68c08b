"""The compile process: a compile's time limit runs from when the process is ready (its start,
an interpreter loading the grammar kernels, is nobody's compile), and a compile past its limit
ends the process, which the next compile starts again."""

import json
import threading

import pytest

from grammars.grammar import Machine
from runtime.scheduler.compile_worker import CompileCancelled, CompileTimeout, CompileWorker

# far under the process's start (an interpreter importing numba: tenths of a second at best),
# far over a small regex's compile once the kernels are loaded (about a millisecond)
SHORT_S = 0.05


@pytest.fixture
def worker():
    worker = CompileWorker()
    yield worker
    worker.close()


def test_the_process_start_does_not_count_against_a_compile(worker):
    machine = worker.build("regex", "[a-z]{3,6}", timeout=SHORT_S)
    assert isinstance(machine, Machine)


def test_a_started_process_is_ready_for_the_first_compile(worker):
    worker.start()
    machine = worker.build("json_schema", '{"type": "integer"}', timeout=SHORT_S)
    assert isinstance(machine, Machine)


def test_a_compile_past_its_limit_ends_the_process_and_the_next_starts_one(worker):
    slow = json.dumps({"enum": [f"{i * 7919 % 1000003:06d}{i:x}" for i in range(200_000)]})
    worker.build("regex", "a+", timeout=SHORT_S)
    first = worker._proc
    with pytest.raises(CompileTimeout, match="took longer than 0.05 s"):
        worker.build("json_schema", slow, timeout=SHORT_S)
    assert first.poll() is not None  # ended
    assert isinstance(worker.build("regex", "b+", timeout=SHORT_S), Machine)


def test_a_cancel_while_the_process_starts_stops_it(worker):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CompileCancelled):
        worker.build("regex", "a+", timeout=SHORT_S, cancel=cancel)
    assert worker._proc is None
