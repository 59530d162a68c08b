"""The interpreter: each program state owns a `StreamExecutor` whose worker thread runs the
appended expressions in order, so a generation is sent as soon as it is reached while the
program goes on; reading a value (`s["x"]`) waits until it exists."""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from typing import TYPE_CHECKING, Any

from lang.ir import (
    ConcateAndAppend,
    ConstantText,
    Expr,
    ExprList,
    Gen,
    Image,
    RoleBegin,
    RoleEnd,
    SamplingParams,
    Select,
    VarScopeBegin,
    VarScopeEnd,
    as_expr,
)

if TYPE_CHECKING:
    from lang.backend.base import BaseBackend
    from lang.chat_template import ChatTemplate

logger = logging.getLogger(__name__)

_END = object()  # queued by `end()`: the worker stops after what came before it


class StreamExecutor:
    """Text, chat messages, variables and meta info of one program state."""

    def __init__(
        self,
        backend: BaseBackend,
        arguments: dict[str, Any],
        defaults: SamplingParams,
        chat_template: ChatTemplate | None = None,
        stream: bool = False,
    ):
        self.sid = uuid.uuid4().hex
        self.backend = backend
        self.arguments = arguments
        self.defaults = defaults
        self.chat_template = chat_template or backend.get_chat_template()
        self.stream = stream

        self.text_ = ""
        self.messages_: list[dict[str, Any]] = []
        self.variables: dict[str | None, Any] = {}
        self.meta_info: dict[str | None, Any] = {}
        self.cur_role: str | None = None
        self.cur_role_begin_pos = 0
        self.fork_start_text_pos: int | None = None
        self.error_: BaseException | None = None
        self.is_finished = False
        self.program_thread: threading.Thread | None = None  # runs a streaming program

        self._pending: set[str | None] = set()  # names submitted but not yet set
        self._changed = threading.Condition()  # notified on every text or variable change
        self._queue: queue.Queue = queue.Queue()
        self._ended = False
        self._worker = threading.Thread(target=self._work, name=f"sgl-{self.sid[:8]}", daemon=True)
        self._worker.start()

    # ---- called from the program's thread ----

    def submit(self, expr: Expr | str) -> None:
        """Queue an expression; its variables count as pending until it has run."""
        expr = as_expr(expr)
        with self._changed:
            self._pending.update(_produced_names(expr))
        self._queue.put(expr)

    def sync(self) -> None:
        """Wait until everything submitted so far has run (for a streaming program read from
        another thread: until the program has returned and its expressions have run)."""
        self._join_program()
        self._queue.join()

    def _join_program(self) -> None:
        thread = self.program_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def end(self) -> None:
        """Stop the worker once the queue is drained (idempotent)."""
        if not self._ended:
            self._ended = True
            self._queue.put(_END)
            self.backend.end_program(self)

    def get_var(self, name: str | None) -> Any:
        """The value of `name`, waiting for the expression that produces it."""
        self._wait_for(name)
        if name in self.variables:
            return self.variables[name]
        raise KeyError(f"no variable {name!r} in this program state")

    def set_var(self, name: str, value: Any) -> None:
        with self._changed:
            self.variables[name] = value
            self._changed.notify_all()

    def get_meta_info(self, name: str | None) -> Any:
        """The server's meta info for generation `name` (None if it has none)."""
        self._wait_for(name)
        return self.meta_info.get(name)

    def text(self) -> str:
        self.sync()
        return self.text_

    def messages(self) -> list[dict[str, Any]]:
        self.sync()
        return self.messages_

    def raise_error(self) -> None:
        """Raise the error an expression of this state failed with, if any."""
        if self.error_ is not None:
            raise self.error_

    def fork(self, size: int) -> list[StreamExecutor]:
        """`size` copies of this state. With more than one, the text so far is committed to
        the server first, so every branch finds it in the prefix cache."""
        self.sync()
        self.raise_error()
        if size > 1 and self.text_:
            self.backend.commit_prefix(self)
        children = []
        for _ in range(int(size)):
            child = StreamExecutor(
                self.backend, self.arguments, self.defaults, self.chat_template, self.stream
            )
            child.text_ = self.text_
            child.messages_ = list(self.messages_)
            child.variables = dict(self.variables)
            child.meta_info = dict(self.meta_info)
            child.cur_role = self.cur_role
            child.cur_role_begin_pos = self.cur_role_begin_pos
            child.fork_start_text_pos = len(self.text_)
            children.append(child)
        return children

    def wait_for_change(self, seen: int, name: str | None = None, timeout: float = 1.0) -> None:
        """Block until the text (or variable `name`) grows past `seen` characters, or the
        state finishes (used by streaming)."""

        def changed() -> bool:
            if self.is_finished or (name is not None and self.is_done(name)):
                return True
            current = self.text_ if name is None else self.variables.get(name)
            return isinstance(current, str) and len(current) > seen

        with self._changed:
            self._changed.wait_for(changed, timeout)

    def is_done(self, name: str) -> bool:
        """Whether variable `name` has its final value (or can no longer get one)."""
        return self.is_finished or (name in self.variables and name not in self._pending)

    # ---- the worker ----

    def _wait_for(self, name: str | None) -> None:
        if name not in self._pending and name not in self.variables:
            self._join_program()  # a streaming program may not have reached it yet
        with self._changed:
            self._changed.wait_for(lambda: name not in self._pending or self.error_ is not None)
        if name in self._pending:
            self.raise_error()

    def _work(self) -> None:
        while True:
            expr = self._queue.get()
            try:
                if expr is _END:
                    break
                if self.error_ is None:
                    self._execute(expr)
            except Exception as e:  # kept for the program's thread, which raises it
                logger.debug("expression failed: %r", e)
                with self._changed:
                    self.error_ = e
            finally:
                with self._changed:
                    self._changed.notify_all()
                self._queue.task_done()
        with self._changed:
            self.is_finished = True
            self._changed.notify_all()

    def _execute(self, expr: Expr) -> None:
        if isinstance(expr, ExprList):
            for item in expr.items:
                self._execute(item)
        elif isinstance(expr, ConstantText):
            self._fill(expr.value)
        elif isinstance(expr, Gen):
            self._execute_gen(expr)
        elif isinstance(expr, Select):
            self._execute_select(expr)
        elif isinstance(expr, RoleBegin):
            self._role_begin(expr.role)
        elif isinstance(expr, RoleEnd):
            self._role_end(expr.role)
        elif isinstance(expr, VarScopeBegin):
            self.variables[expr.name] = len(self.text_)
        elif isinstance(expr, VarScopeEnd):
            self._set(expr.name, self.text_[self.variables[expr.name] :], None)
        elif isinstance(expr, ConcateAndAppend):
            self._concatenate(expr.states)
        elif isinstance(expr, Image):
            self.backend.fill_image(self, expr.path)
        else:
            raise TypeError(f"cannot execute {expr!r}")

    def _fill(self, value: Any) -> None:
        with self._changed:
            self.text_ += str(value)
            self._changed.notify_all()

    def _set(self, name: str | None, value: Any, meta: Any) -> None:
        with self._changed:
            self.variables[name] = value
            self.meta_info[name] = meta
            self._pending.discard(name)
            self._changed.notify_all()

    def _execute_gen(self, expr: Gen) -> None:
        params = expr.params.merged_over(self.defaults)
        if not self.stream:
            value, meta = self.backend.generate(self, params)
            self._fill(value[0] if isinstance(value, list) else value)
            self._set(expr.name, value, meta)
            return
        with self._changed:
            self.variables[expr.name] = ""
        meta = None
        for piece, meta in self.backend.generate_stream(self, params):
            with self._changed:
                self.text_ += piece
                self.variables[expr.name] += piece
                self.meta_info[expr.name] = meta
                self._changed.notify_all()
        self._set(expr.name, self.variables[expr.name], meta)

    def _execute_select(self, expr: Select) -> None:
        decision = self.backend.select(self, expr.choices, expr.temperature, expr.choices_method)
        self._fill(decision.decision)
        self._set(expr.name, decision.decision, decision.meta_info)

    def _role_begin(self, role: str) -> None:
        if self.cur_role is not None:
            raise ValueError(f"role {role!r} begins inside role {self.cur_role!r}")
        default_system = self.chat_template.default_system_prompt
        if not self.messages_ and role != "system" and default_system:
            self._role_begin("system")
            self._fill(default_system)
            self._role_end("system")
        self.cur_role = role
        self._fill(self.chat_template.prefix_and_suffix(role)[0])
        self.cur_role_begin_pos = len(self.text_)

    def _role_end(self, role: str) -> None:
        content = self.text_[self.cur_role_begin_pos :].lstrip()
        self.cur_role = None
        self._fill(self.chat_template.prefix_and_suffix(role)[1])
        self.messages_.append({"role": role, "content": content})

    def _concatenate(self, states: list) -> None:
        for state in states:
            child = state.stream_executor
            child.sync()
            child.raise_error()
            self._fill(child.text_[child.fork_start_text_pos :])


def _produced_names(expr: Expr) -> list[str | None]:
    """Names of the variables an expression sets when it runs (a scope's at its end)."""
    if isinstance(expr, ExprList):
        return [name for item in expr.items for name in _produced_names(item)]
    if isinstance(expr, (Gen, Select, VarScopeBegin)):
        return [expr.name]
    return []
