"""Tracing: run a program's function on placeholder arguments and record the expressions it
appends, without calling a model. `run_batch` uses the constant text a trace starts with
(e.g. a long system prompt) to fill the server's prefix cache once before the batch."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lang.chat_template import ChatTemplate
from lang.ir import (
    Argument,
    ConstantText,
    Expr,
    ExprList,
    Fork,
    Gen,
    RoleBegin,
    RoleEnd,
    Select,
    Variable,
    VarScopeBegin,
    VarScopeEnd,
    as_expr,
    role_expr,
)
from lang.state import ProgramStateGroup

if TYPE_CHECKING:
    from lang.backend.base import BaseBackend
    from lang.function import SglFunction

logger = logging.getLogger(__name__)

MIN_PRECACHE_CHARS = 64  # shorter constant prefixes are not worth a request


class StopTracing(Exception):
    """Raised where a prefix-only trace stops (the first fork)."""


class TracerProgramState:
    """Stands in for a `ProgramState` while tracing: appends are recorded as `nodes`, roles
    are rendered to their constant text, and reads return `Variable` placeholders."""

    def __init__(self, chat_template: ChatTemplate, arguments: dict, only_prefix: bool):
        self.chat_template = chat_template
        self.arguments = arguments
        self.only_prefix = only_prefix
        self.nodes: list[Expr] = []
        self.variables: dict[str | None, Variable] = {}
        self.messages_: list[dict] = []
        self.child_states: list[TracerProgramState] = []
        self.ret_value: Any = None

    def __iadd__(self, other: Expr | str) -> TracerProgramState:
        self._record(as_expr(other))
        return self

    def _record(self, expr: Expr) -> None:
        if isinstance(expr, ExprList):
            for item in expr.items:
                self._record(item)
        elif isinstance(expr, RoleBegin):
            default_system = self.chat_template.default_system_prompt
            if not self.messages_ and expr.role != "system" and default_system:
                self._record(ExprList([RoleBegin("system"), as_expr(default_system)]))
                self._record(RoleEnd("system"))
            self.nodes.append(ConstantText(self.chat_template.prefix_and_suffix(expr.role)[0]))
        elif isinstance(expr, RoleEnd):
            self.nodes.append(ConstantText(self.chat_template.prefix_and_suffix(expr.role)[1]))
            self.messages_.append({"role": expr.role, "content": ""})
        else:
            if isinstance(expr, (Gen, Select, VarScopeEnd)):
                self.variables[expr.name] = Variable(expr.name, expr)
            self.nodes.append(expr)

    def _role(self, role: str, expr: Expr | str | None):
        if expr is not None:
            self._record(role_expr(role, expr))
            return None
        return self._role_block(role)

    @contextlib.contextmanager
    def _role_block(self, role: str) -> Iterator[None]:
        self._record(RoleBegin(role))
        yield
        self._record(RoleEnd(role))

    def system(self, expr=None):
        return self._role("system", expr)

    def user(self, expr=None):
        return self._role("user", expr)

    def assistant(self, expr=None):
        return self._role("assistant", expr)

    @contextlib.contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        self._record(VarScopeBegin(name))
        yield
        self._record(VarScopeEnd(name))

    def fork(self, size: int = 1, position_ids_offset: Any = None) -> TracedForks:
        if self.only_prefix:
            raise StopTracing
        self.nodes.append(Fork(size))
        children = []
        for _ in range(size):
            child = TracerProgramState(self.chat_template, self.arguments, False)
            child.variables = dict(self.variables)
            child.messages_ = list(self.messages_)
            children.append(child)
        self.child_states.extend(children)
        return TracedForks(children, self)

    def __getitem__(self, name: str) -> Any:
        if name in self.arguments and not isinstance(self.arguments[name], Argument):
            return self.arguments[name]
        if name not in self.variables:
            raise KeyError(f"no variable {name!r} was generated before it is read")
        return Variable(name, self.variables[name].source)

    get_var = __getitem__

    def get_meta_info(self, name: str) -> dict:
        return {}

    def text(self) -> str:
        return "".join(n.value if isinstance(n, ConstantText) else f"{{{n}}}" for n in self.nodes)

    def messages(self) -> list[dict]:
        return self.messages_

    def sync(self) -> None:
        pass

    def flatten_nodes(self) -> list[Expr]:
        """The recorded expressions (role text already rendered as constants)."""
        return list(self.nodes)

    def constant_prefix(self) -> str:
        """The text before the first expression that depends on arguments or the model."""
        prefix = []
        for node in self.nodes:
            if not isinstance(node, ConstantText):
                break
            prefix.append(node.value)
        return "".join(prefix)


class TracedForks(ProgramStateGroup):
    """The branches of a traced fork; joining them records nothing."""

    def join(self, mode: str = "gather_variable") -> None:
        pass


def trace_program(program: SglFunction, arguments: dict, backend: BaseBackend | None):
    """Trace `program` with the given arguments; missing ones become placeholders."""
    template = backend.get_chat_template() if backend is not None else ChatTemplate.plain()
    args = {name: Argument(name) for name in program.arg_names if name not in arguments}
    args.update(arguments)
    args.update(program.bind_arguments)
    tracer = TracerProgramState(template, args, only_prefix=False)
    tracer.ret_value = program.func(tracer, **args)
    return tracer


def extract_prefix_by_tracing(program: SglFunction, backend: BaseBackend) -> str:
    """The constant text every run of `program` starts with ("" when it has none)."""
    args: dict[str, Any] = {name: Argument(name) for name in program.arg_names}
    args.update(program.bind_arguments)
    tracer = TracerProgramState(backend.get_chat_template(), args, only_prefix=True)
    # A program that computes with an argument's value stops the trace there; what was
    # recorded before that point is still a valid prefix.
    with contextlib.suppress(StopTracing, TypeError, AttributeError, KeyError, ValueError):
        program.func(tracer, **args)
    return tracer.constant_prefix()


def cache_program(program: SglFunction, backend: BaseBackend) -> str:
    """Fill the prefix cache with the program's constant prefix; returns that prefix."""
    prefix = extract_prefix_by_tracing(program, backend)
    if len(prefix) > MIN_PRECACHE_CHARS:
        logger.debug("pre-caching a %d-character program prefix", len(prefix))
        backend.cache_prefix(prefix)
    return prefix
