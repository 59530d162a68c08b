"""The expressions a program appends to its state: text, generations, choices, roles and the
markers that fork/join and variable scopes need. `a + b` builds an `ExprList`."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lang.choices import ChoicesSamplingMethod

# Regular expressions behind `gen(dtype=...)`; a trailing blank ends the number (it is a stop).
DTYPE_REGEX = {
    "int": r"[-+]?[0-9]{1,18}[ \n]*",
    "float": r"[-+]?[0-9]{1,16}(\.[0-9]{1,16})?[ \n]*",
    "bool": r"(True|False)",
    "str": r'"[^"\\\n]*"',
}
DTYPE_STOPS = {"int": [" ", "\n"], "float": [" ", "\n"]}


def dtype_name(dtype: type | str | None) -> str | None:
    """`int` or "int" -> "int"; None stays None; anything else is refused."""
    if dtype is None:
        return None
    name = dtype.__name__ if isinstance(dtype, type) else str(dtype)
    if name not in DTYPE_REGEX:
        raise ValueError(f"dtype must be one of int, float, bool, str; got {dtype!r}")
    return name


@dataclass
class SamplingParams:
    """Sampling options of one generation; None means "not set here" so that a `gen`'s own
    options can be laid over the defaults a `run` call gives (`merged_over`)."""

    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    ignore_eos: bool | None = None
    return_logprob: bool | None = None
    logprob_start_len: int | None = None
    top_logprobs_num: int | None = None
    return_text_in_logprobs: bool | None = None
    dtype: str | None = None
    regex: str | None = None
    json_schema: str | None = None

    def merged_over(self, defaults: SamplingParams) -> SamplingParams:
        """These options where set, the defaults elsewhere."""
        values = {
            f.name: getattr(self, f.name)
            if getattr(self, f.name) is not None
            else getattr(defaults, f.name)
            for f in dataclasses.fields(self)
        }
        return SamplingParams(**values)

    def stop_list(self) -> list[str]:
        """The stop strings as a list, with the ones the dtype needs."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return stops + [s for s in DTYPE_STOPS.get(self.dtype or "", []) if s not in stops]

    def constraint_regex(self) -> str | None:
        """The regex to send: the dtype's when a dtype is set, else the user's."""
        return DTYPE_REGEX[self.dtype] if self.dtype else self.regex


def run_defaults(**overrides: Any) -> SamplingParams:
    """The defaults of `run`/`run_batch` (SGLang's): 128 new tokens at temperature 1."""
    base = SamplingParams(
        max_new_tokens=128,
        stop=[],
        stop_token_ids=[],
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        min_p=0.0,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        ignore_eos=False,
    )
    return SamplingParams(**overrides).merged_over(base)


def schema_text(schema: str | dict | None) -> str | None:
    """A JSON schema as the string the server takes."""
    return json.dumps(schema) if isinstance(schema, dict) else schema


class Expr:
    """Anything that can be appended to a program state; `+` concatenates."""

    def __add__(self, other: Expr | str) -> ExprList:
        return ExprList(_items(self) + _items(as_expr(other)))

    def __radd__(self, other: Expr | str) -> ExprList:
        return ExprList(_items(as_expr(other)) + _items(self))


def as_expr(value: Expr | str) -> Expr:
    """Plain strings become constant text; expressions pass through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return ConstantText(value)
    raise TypeError(f"cannot append {type(value).__name__} to a program state: {value!r}")


def role_expr(role: str, expr: Expr | str | None = None) -> ExprList:
    """A message of `role` around `expr` (an empty one without)."""
    items = [] if expr is None else [as_expr(expr)]
    return ExprList([RoleBegin(role), *items, RoleEnd(role)])


def _items(expr: Expr) -> list[Expr]:
    return list(expr.items) if isinstance(expr, ExprList) else [expr]


@dataclass(eq=False)
class ExprList(Expr):
    """Expressions executed in order."""

    items: list[Expr]


@dataclass(eq=False)
class ConstantText(Expr):
    """Literal prompt text."""

    value: str


@dataclass(eq=False)
class Gen(Expr):
    """A generation whose text is appended and stored under `name`."""

    name: str | None
    params: SamplingParams


@dataclass(eq=False)
class Select(Expr):
    """A choice among fixed strings, scored by prompt logprobs with `choices_method`."""

    name: str | None
    choices: list[str]
    temperature: float
    choices_method: ChoicesSamplingMethod


@dataclass(eq=False)
class RoleBegin(Expr):
    """Opens a chat message of `role`."""

    role: str


@dataclass(eq=False)
class RoleEnd(Expr):
    """Closes the chat message of `role`."""

    role: str


@dataclass(eq=False)
class VarScopeBegin(Expr):
    """Marks where the text captured by `var_scope(name)` begins."""

    name: str


@dataclass(eq=False)
class VarScopeEnd(Expr):
    """Stores the text since the matching `VarScopeBegin` under `name`."""

    name: str


@dataclass(eq=False)
class Image(Expr):
    """An image input (the served models have no vision, so backends refuse it)."""

    path: str


@dataclass(eq=False)
class Fork(Expr):
    """Where a traced program forks into `size` branches."""

    size: int


@dataclass(eq=False)
class ConcateAndAppend(Expr):
    """Appends, in order, what each forked state added after the fork."""

    states: list[Any]


@dataclass(eq=False)
class Argument(Expr):
    """A program argument whose value is not known while tracing."""

    name: str

    def __format__(self, spec: str) -> str:
        raise TypeError(f"argument {self.name!r} is unknown while tracing (used in an f-string)")

    def __str__(self) -> str:
        raise TypeError(f"argument {self.name!r} is unknown while tracing")


@dataclass(eq=False)
class Variable(Expr):
    """A traced reference to a value a generation, select or scope produces."""

    name: str | None
    source: Expr | None = None
