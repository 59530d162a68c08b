"""The compile process: a compile's time limit runs from when the process is ready (its start,
an interpreter loading the grammar kernels, is nobody's compile); a compile past its limit ends
the process, which the next compile starts again; a cancelled request leaves a start running
for the next; a process that dies (at start or while it compiles) fails its compile as such;
closing ends the process at once, also under a compile."""

import json
import threading

import pytest

from grammars.grammar import Machine
from runtime.scheduler import compile_worker
from runtime.scheduler.compile_worker import (
    CompileCancelled,
    CompileTimeout,
    CompileWorker,
    CompileWorkerDied,
)

# under the process's start (an interpreter importing numba and loading the kernels: 0.8-1.8 s
# here), far over a small regex's compile once they are loaded (about a millisecond, in a
# process at nice 10 on a busy machine)
SHORT_S = 0.2
EARLY_S = 0.02  # well inside the process's start
# an enum of 200,000 strings: seconds to compile
_SLOW = json.dumps({"enum": [f"{i * 7919 % 1000003:06d}{i:x}" for i in range(200_000)]})


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
    worker.build("regex", "a+", timeout=SHORT_S)
    first = worker._proc
    with pytest.raises(CompileTimeout, match=f"took longer than {SHORT_S} s"):
        worker.build("json_schema", _SLOW, timeout=SHORT_S)
    assert first.poll() is not None  # ended
    assert isinstance(worker.build("regex", "b+", timeout=SHORT_S), Machine)


def test_a_cancel_before_the_start_starts_nothing(worker, monkeypatch):
    def no_start(*args, **kwargs):
        raise AssertionError("a process was started for a cancelled request")

    monkeypatch.setattr(compile_worker.subprocess, "Popen", no_start)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CompileCancelled):
        worker.build("regex", "a+", timeout=SHORT_S, cancel=cancel)


def test_a_cancel_while_the_process_starts_keeps_the_start_for_the_next_compile(worker):
    cancel = threading.Event()
    threading.Timer(EARLY_S, cancel.set).start()
    with pytest.raises(CompileCancelled):
        worker.build("regex", "a+", timeout=SHORT_S, cancel=cancel)
    starting = worker._proc
    assert starting.poll() is None  # still starting, not killed
    assert isinstance(worker.build("regex", "b+", timeout=SHORT_S), Machine)
    assert worker._proc is starting


def test_a_process_that_dies_at_start_fails_the_compile_as_died(worker, monkeypatch):
    monkeypatch.setattr(compile_worker, "__name__", "runtime.scheduler.no_such_module")
    with pytest.raises(CompileWorkerDied, match="died"):
        worker.build("regex", "a+", timeout=SHORT_S)
    assert worker._proc is None and worker._conn is None
    monkeypatch.undo()
    assert isinstance(worker.build("regex", "b+", timeout=SHORT_S), Machine)


def test_a_process_killed_while_it_compiles_fails_the_compile_as_died(worker):
    worker.start()
    victim = worker._proc
    threading.Timer(0.3, victim.kill).start()  # the enum takes seconds to compile
    with pytest.raises(CompileWorkerDied, match="died"):
        worker.build("json_schema", _SLOW, timeout=60)
    assert worker._proc is None
    assert isinstance(worker.build("regex", "b+", timeout=SHORT_S), Machine)


def test_closing_under_a_compile_ends_the_process_at_once(worker):
    worker.start()
    child = worker._proc
    failed = []

    def compile_slow():
        try:
            worker.build("json_schema", _SLOW, timeout=60)  # seconds to compile
        except CompileWorkerDied as exc:
            failed.append(str(exc))

    thread = threading.Thread(target=compile_slow)
    thread.start()
    while not worker._lock.locked():  # the compile holds the lock
        threading.Event().wait(0.01)
    worker.close()  # does not wait for the compile to finish (it would succeed then)
    thread.join()
    assert failed == ["the grammar compile process was closed"]
    assert child.poll() is not None and worker._proc is None
    assert not worker._closing  # a later death reads as one
    assert isinstance(worker.build("regex", "b+", timeout=SHORT_S), Machine)  # a new child
