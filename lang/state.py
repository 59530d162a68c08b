"""`ProgramState` is the `s` a program appends to; `ProgramStateGroup` holds its forks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from lang.executor import StreamExecutor
from lang.ir import (
    ConcateAndAppend,
    Expr,
    RoleBegin,
    RoleEnd,
    VarScopeBegin,
    VarScopeEnd,
    role_expr,
)

logger = logging.getLogger(__name__)


class ProgramState:
    """The state of one running program: `s += expr` appends, `s["x"]` reads (waiting until
    the value exists), `text()`, `messages()` and `get_meta_info(name)` report."""

    def __init__(self, stream_executor: StreamExecutor):
        self.stream_executor = stream_executor
        self.ret_value: Any = None

    # ---- building ----

    def __iadd__(self, other: Expr | str) -> ProgramState:
        if other is None:
            raise ValueError("cannot append None to a program state")
        self.stream_executor.submit(other)
        return self

    def _role(self, role: str, expr: Expr | str | None):
        if expr is not None:
            self.stream_executor.submit(role_expr(role, expr))
            return None
        return self._role_block(role)

    @contextlib.contextmanager
    def _role_block(self, role: str) -> Iterator[None]:
        self.stream_executor.submit(RoleBegin(role))
        yield
        self.stream_executor.submit(RoleEnd(role))

    def system(self, expr: Expr | str | None = None):
        """`s.system(expr)` appends a system message; `with s.system():` opens one."""
        return self._role("system", expr)

    def user(self, expr: Expr | str | None = None):
        """`s.user(expr)` appends a user message; `with s.user():` opens one."""
        return self._role("user", expr)

    def assistant(self, expr: Expr | str | None = None):
        """`s.assistant(expr)` appends an assistant message; `with s.assistant():` opens one."""
        return self._role("assistant", expr)

    @contextlib.contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """Store the text appended inside the block under `name`."""
        self.stream_executor.submit(VarScopeBegin(name))
        yield
        self.stream_executor.submit(VarScopeEnd(name))

    def fork(self, size: int = 1, position_ids_offset: Any = None) -> ProgramStateGroup:
        """`size` branches that continue from the current text concurrently."""
        children = self.stream_executor.fork(size)
        return ProgramStateGroup([ProgramState(c) for c in children], self)

    @contextlib.contextmanager
    def copy(self) -> Iterator[ProgramState]:
        """One branch, joined back when the block ends."""
        group = self.fork(1)
        try:
            yield group[0]
        finally:
            group.join()

    # ---- reading ----

    def __getitem__(self, name: str) -> Any:
        return self.stream_executor.get_var(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.stream_executor.set_var(name, value)

    def __contains__(self, name: str) -> bool:
        return name in self.stream_executor.variables

    def get_var(self, name: str) -> Any:
        return self.stream_executor.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        self.stream_executor.set_var(name, value)

    def get_meta_info(self, name: str) -> Any:
        """The server's meta info for generation `name` (prompt, completion and cached
        tokens, finish reason, logprobs when asked), or the select's scores."""
        return self.stream_executor.get_meta_info(name)

    def text(self) -> str:
        """The whole text so far (waits for pending expressions)."""
        return self.stream_executor.text()

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages so far as [{"role", "content"}]."""
        return self.stream_executor.messages()

    def sync(self) -> None:
        """Wait until every appended expression has run."""
        self.stream_executor.sync()

    def error(self) -> BaseException | None:
        """The error an expression failed with, if any."""
        self.stream_executor.sync()
        return self.stream_executor.error_

    # ---- streaming ----

    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """Pieces of the text (or of variable `var_name`) as they are generated; without
        `stream=True` the whole text once it is there."""
        executor = self.stream_executor
        if not executor.stream:
            yield self.text() if var_name is None else self.get_var(var_name)
            return
        seen = 0
        while True:
            executor.wait_for_change(seen, var_name)
            current = executor.text_ if var_name is None else executor.variables.get(var_name)
            if isinstance(current, str) and len(current) > seen:
                yield current[seen:]
                seen = len(current)
            elif _stream_done(executor, var_name):
                return

    async def text_async_iter(
        self, var_name: str | None = None, return_meta_data: bool = False
    ) -> AsyncIterator[Any]:
        """`text_iter` for asyncio code; with `return_meta_data`, (piece, meta_info) pairs."""
        loop = asyncio.get_running_loop()
        pieces = self.text_iter(var_name)
        while True:
            piece = await loop.run_in_executor(None, next, pieces, None)
            if piece is None:
                return
            if return_meta_data:
                yield piece, self.stream_executor.meta_info.get(var_name)
            else:
                yield piece

    def __del__(self):
        executor = self.__dict__.get("stream_executor")
        if executor is not None:
            executor.end()

    def __repr__(self) -> str:
        return f"ProgramState({self.stream_executor.text_!r})"


def _stream_done(executor: StreamExecutor, var_name: str | None) -> bool:
    if var_name is None:
        return executor.is_finished
    return executor.is_done(var_name)


class ProgramStateGroup:
    """The branches of a fork: `forks[i]`, `forks += expr | [exprs] | (lambda i: expr)`,
    `join()`."""

    def __init__(self, states: list[ProgramState], src_state: ProgramState):
        self.states = states
        self.src_state = src_state

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __setitem__(self, i: int, value: ProgramState) -> None:
        if self.states[i] is not value:  # `forks[i] += x` assigns the same state back
            raise ValueError("fork branches cannot be replaced")

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __iadd__(self, other: Expr | str | list | Callable[[int], Any]) -> ProgramStateGroup:
        for i, state in enumerate(self.states):
            if callable(other):
                state += other(i)
            elif isinstance(other, (list, tuple)):
                state += other[i]
            else:
                state += other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for every branch. "gather_variable" gives the parent, for each variable the
        branches created, the list of their values; "concate_and_append" appends each
        branch's new text to the parent's, in order."""
        if mode == "gather_variable":
            parent = self.src_state.stream_executor
            before = set(parent.variables)
            for state in self.states:
                state.stream_executor.sync()
                state.stream_executor.raise_error()
            for state in self.states:
                for name, value in state.stream_executor.variables.items():
                    if name not in before:
                        parent.variables.setdefault(name, []).append(value)
                        parent.meta_info.setdefault(name, []).append(
                            state.stream_executor.meta_info.get(name)
                        )
        elif mode == "concate_and_append":
            self.src_state += ConcateAndAppend(self.states)
            self.src_state.sync()
            self.src_state.stream_executor.raise_error()
        else:
            raise ValueError(f"join mode must be gather_variable or concate_and_append: {mode!r}")
        for state in self.states:
            state.stream_executor.end()
