"""A child process that builds grammar automata, so that compiling never holds the scheduler's
GIL (a Python thread compiling beside the forward pass slows every step many times over) and a
compile that runs too long, or whose request is aborted, is stopped by ending the process.

The child builds a vocabulary-free `grammars` Machine and sends it back pickled; the scheduler
pairs it with its vocabulary. A killed child is started again on the next compile.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import NoReturn

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.05  # how often a waiting compile looks at its deadline and cancel event
COMPILE_NICENESS = 10
START_SECONDS = 300  # a child's start: import, then load the kernels (a fresh install builds them)


class CompileTimeout(Exception):
    """The compile ran past its time limit; the child was ended."""


class CompileCancelled(Exception):
    """The request went away while its grammar compiled; the child was ended."""


class CompileWorkerDied(RuntimeError):
    """The compile child exited while compiling (killed from outside, out of memory, or
    ended by CompileWorker.close)."""


class CompileWorker:
    """One child process, one compile at a time (callers queue on a lock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None
        self._ready_by: float | None = None  # while the child starts: when it must be ready
        self._closing = False  # close() is ending the child

    def build(
        self,
        kind: str,
        spec,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        options: dict | None = None,
    ):
        """The Machine of a constraint (`kind` and `options` as grammars.build_machine takes
        them). The grammar's own errors come back as GrammarError; CompileTimeout /
        CompileCancelled when stopped, CompileWorkerDied when the child dies."""
        with self._lock:
            # the clock starts once the child is ready: its start (an interpreter, the imports,
            # the kernels read from numba's disk cache: seconds on a busy machine) is no
            # request's compile, as the parent's own kernel build is not (constrained.py)
            self._ready(cancel)
            self._send((kind, spec, timeout, options or {}))
            deadline = None if timeout is None else time.monotonic() + timeout
            late = CompileTimeout(f"compiling the constraint took longer than {timeout or 0:.3g} s")
            self._wait(deadline, cancel, late)
            status, value = self._recv()
        if status == "ok":
            return value
        if status == "internal":
            raise RuntimeError(f"the grammar compiler failed: {value}")
        from grammars import GrammarError

        raise GrammarError(value)

    def start(self) -> None:
        """Start the child now and wait until it has loaded the grammar kernels, ahead of the
        first compile."""
        with self._lock:
            self._ready()

    def close(self) -> None:
        """End the child now, also while other threads compile or wait for its start (each
        such call fails with CompileWorkerDied): every child is killed until the lock is free,
        which is then only taken to clear up. A later compile starts a new child."""
        self._closing = True
        try:
            while not self._lock.acquire(timeout=POLL_SECONDS):
                proc = self._proc  # (a compile waiting for the lock may start one meanwhile)
                if proc is not None:
                    proc.kill()  # its compile sees its end of the socket close
            try:
                self._stop()
            finally:
                self._lock.release()
        finally:
            self._closing = False

    def _ready(self, cancel: threading.Event | None = None) -> None:
        """Start the child unless it runs, and wait until it is ready. A cancel while it starts
        ends the wait, not the start: the next compile waits for the rest of it rather than
        paying for a new one."""
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            if cancel is not None and cancel.is_set():
                raise CompileCancelled("the request was aborted before its grammar compiled")
            # a fresh interpreter (not multiprocessing's spawn, which would re-run the user's
            # main module), talking over one end of a socket pair
            ours, theirs = socket.socketpair()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())], pass_fds=[theirs.fileno()]
            )
            theirs.close()
            self._conn = Connection(ours.detach())
            self._ready_by = time.monotonic() + START_SECONDS
        if self._ready_by is not None:
            late = CompileWorkerDied(
                f"the grammar compile process did not start in {START_SECONDS} s"
            )
            self._wait(self._ready_by, cancel, late, stop_on_cancel=False)
            if self._recv() != ("ready", None):
                self._stop()
                raise CompileWorkerDied("the grammar compile process did not say it was ready")
            self._ready_by = None

    def _wait(self, deadline, cancel, late: Exception, stop_on_cancel: bool = True) -> None:
        """Until the child has something to say (or has closed its end); the child is ended
        and an error raised if `cancel` is set (the child kept if not `stop_on_cancel`),
        `deadline` passes (`late`) or the child dies."""
        while not self._conn.poll(POLL_SECONDS):
            if cancel is not None and cancel.is_set():
                if stop_on_cancel:
                    self._stop()
                raise CompileCancelled("the request was aborted while its grammar compiled")
            if deadline is not None and time.monotonic() > deadline:
                self._stop()
                raise late
            if self._proc.poll() is not None:
                self._died()

    def _send(self, message) -> None:
        try:
            self._conn.send(message)
        except OSError:  # the child is gone
            self._died()

    def _recv(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):  # the child exited: its end closed
            self._died()

    def _died(self) -> NoReturn:
        self._stop()
        why = "was closed" if self._closing else "died"
        raise CompileWorkerDied(f"the grammar compile process {why}")

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = self._ready_by = None


def _serve(conn: Connection) -> None:
    """The child's loop: a job in, ("ok", Machine) or ("error", message) out; it ends when the
    parent's end of the pipe closes (the parent exited or was killed)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops us
    os.nice(COMPILE_NICENESS)  # on a busy CPU, forward passes come before compiles
    from grammars import CompileBudget, GrammarError, build_machine, warm_up_builds
    from runtime.ipc import freeze_heap

    try:
        warm_up_builds()  # the kernels a build runs, read from numba's disk cache or built
    except Exception:  # each compile then builds what it needs as it goes
        logger.exception("building the grammar kernels ahead of compiles failed")
    freeze_heap("grammar compiler")  # a full collection walked the imports, ~9 ms here
    conn.send(("ready", None))
    while True:
        try:
            kind, spec, timeout, options = conn.recv()
        except (EOFError, OSError):
            return
        try:
            # the budget only backs up the parent's clock: the parent ends us on time anyway
            machine = build_machine(kind, spec, budget=CompileBudget(timeout=timeout), **options)
            reply = ("ok", machine)
        except GrammarError as exc:
            reply = ("error", str(exc))
        except RecursionError:
            reply = ("error", "constraint nested too deeply")
        except Exception as exc:  # a bug in the compiler: report it, keep serving
            logger.exception("compiling a %s constraint failed", kind)
            reply = ("internal", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
