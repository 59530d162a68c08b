"""Compile budgets: a deadline, a cancel event and a size limit for one compile.

Compiling is ordinary Python code, so it stops cooperatively: every loop of compilation that can
run long calls `checkpoint()` (most of them every few thousand iterations), which checks the
budget of the compile running in this thread. The compiler makes its budget current with
`running(budget)`; the budget lives in a context variable, so compiles in other threads each see
their own (or none). Library code whose loops we cannot reach (lark loading a grammar) runs
under `watching_calls()`, which checks the budget every few thousand Python calls.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from grammars.errors import GrammarCancelled, GrammarError, GrammarTimeout

_CALLS_PER_CHECK = 4096


class CompileBudget:
    """Bounds one compile: `timeout` seconds counted from the budget's creation, a `cancel`
    event another thread may set, and `max_bytes` of constraint text (UTF-8: the schema's JSON
    text, the regex, the grammar, the choices together). A budget may be shared by several
    compiles (one request's constraints); the clock does not restart."""

    __slots__ = ("timeout", "cancel", "max_bytes", "_deadline")

    def __init__(
        self,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        max_bytes: int | None = None,
    ):
        self.timeout = timeout
        self.cancel = cancel
        self.max_bytes = max_bytes
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def __repr__(self) -> str:
        return (
            f"CompileBudget(timeout={self.timeout!r}, cancel={self.cancel!r}, "
            f"max_bytes={self.max_bytes!r})"
        )

    @property
    def bounds_time(self) -> bool:
        """Whether check() can ever raise."""
        return self._deadline is not None or self.cancel is not None

    def check(self) -> None:
        """GrammarCancelled once `cancel` is set; GrammarTimeout once `timeout` has passed."""
        if self.cancel is not None and self.cancel.is_set():
            raise GrammarCancelled("compiling the constraint was cancelled")
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise GrammarTimeout(f"compiling the constraint took longer than {self.timeout:.3g} s")

    def check_size(self, size: int) -> None:
        """GrammarError when a constraint of `size` bytes is above `max_bytes`."""
        if self.max_bytes is not None and size > self.max_bytes:
            raise GrammarError(
                f"the constraint is {size} bytes long, above the limit of {self.max_bytes} bytes"
            )


_CURRENT: ContextVar[CompileBudget | None] = ContextVar("grammars_compile_budget", default=None)


def checkpoint() -> None:
    """Check the budget of the compile running in this thread, if any (cheap: call it from
    loops, every iteration where one costs microseconds, else every few thousand)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.check()


@contextmanager
def running(budget: CompileBudget | None) -> Iterator[None]:
    """Make `budget` the one checkpoint() checks in this thread while the block runs."""
    token = _CURRENT.set(budget)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class _OverBudget(BaseException):
    """Raised from the trace function; a BaseException so library code cannot swallow it."""


@contextmanager
def watching_calls() -> Iterator[None]:
    """Check the current budget every few thousand Python function calls made in the block, for
    library code with no checkpoints (a trace function on this thread only; it slows the
    block, so it is installed only when the budget bounds time)."""
    budget = _CURRENT.get()
    if budget is None or not budget.bounds_time:
        yield
        return
    budget.check()
    calls = 0
    spent: list[GrammarError] = []

    def trace(frame, event, arg):
        nonlocal calls
        calls += 1
        if not calls % _CALLS_PER_CHECK:
            try:
                budget.check()
            except GrammarError as exc:
                spent.append(exc)
                raise _OverBudget() from None
        # None: no per-line tracing inside the frame

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        yield
    except _OverBudget:
        pass
    finally:
        sys.settrace(previous)
    if spent:
        raise spent[0]
