"""The public constructors of the DSL, with SGLang's names and defaults."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lang.choices import ChoicesSamplingMethod, token_length_normalized
from lang.function import SglFunction, resolve_backend
from lang.global_config import global_config
from lang.ir import (
    Expr,
    ExprList,
    Gen,
    Image,
    RoleBegin,
    RoleEnd,
    SamplingParams,
    Select,
    dtype_name,
    role_expr,
    schema_text,
)


def function(func: Callable | None = None, num_api_spec_tokens: int | None = None):
    """Make `func(s, ...)` a program; usable as `@function` or `@function(...)`."""
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens)
    return lambda f: SglFunction(f, num_api_spec_tokens=num_api_spec_tokens)


def set_default_backend(backend: Any) -> None:
    """The backend programs use when `run` gets no `backend=`."""
    global_config.default_backend = backend


def flush_cache(backend: Any = None) -> None:
    """Empty the prefix cache of the (default) backend's server."""
    resolve_backend(backend).flush_cache()


def get_server_info(backend: Any = None) -> dict:
    """The (default) backend server's description of itself."""
    return resolve_backend(backend).get_server_info()


def gen(
    name: str | None = None,
    max_tokens: int | None = None,
    min_tokens: int | None = None,
    n: int | None = None,
    stop: str | list[str] | None = None,
    stop_token_ids: list[int] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    ignore_eos: bool | None = None,
    return_logprob: bool | None = None,
    logprob_start_len: int | None = None,
    top_logprobs_num: int | None = None,
    return_text_in_logprobs: bool | None = None,
    dtype: type | str | None = None,
    choices: list[str] | None = None,
    choices_method: ChoicesSamplingMethod | None = None,
    regex: str | None = None,
    json_schema: str | dict | None = None,
) -> Expr:
    """A generation stored under `name`. With `choices` it is a `select`; `regex`,
    `json_schema` or `dtype` (int, float, bool, str) constrain the output."""
    if choices:
        return select(
            name,
            choices,
            0.0 if temperature is None else temperature,
            choices_method or token_length_normalized,
        )
    if regex is not None:
        re.compile(regex)  # a clear error here rather than an HTTP 400 later
    params = SamplingParams(
        max_new_tokens=max_tokens,
        min_new_tokens=min_tokens,
        n=n,
        stop=stop,
        stop_token_ids=stop_token_ids,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty,
        ignore_eos=ignore_eos,
        return_logprob=return_logprob,
        logprob_start_len=logprob_start_len,
        top_logprobs_num=top_logprobs_num,
        return_text_in_logprobs=return_text_in_logprobs,
        dtype=dtype_name(dtype),
        regex=regex,
        json_schema=schema_text(json_schema),
    )
    return Gen(name, params)


def gen_int(name: str | None = None, **kwargs: Any) -> Expr:
    """A generation constrained to an integer (its value is the digits' text)."""
    return gen(name, dtype=int, **kwargs)


def gen_string(name: str | None = None, **kwargs: Any) -> Expr:
    """A generation constrained to a double-quoted string."""
    return gen(name, dtype=str, **kwargs)


def select(
    name: str | None = None,
    choices: list[str] | None = None,
    temperature: float = 0.0,
    choices_method: ChoicesSamplingMethod = token_length_normalized,
) -> Expr:
    """Pick one of `choices` by the model's logprobs of each, scored by `choices_method`."""
    if not choices:
        raise ValueError("select needs a non-empty list of choices")
    return Select(name, [str(c) for c in choices], temperature, choices_method)


def image(path: str) -> Expr:
    """An image input; the served models have no vision, so running it raises an error."""
    return Image(path)


def system(expr: Expr | str | None = None) -> ExprList:
    """A system message around `expr`."""
    return role_expr("system", expr)


def user(expr: Expr | str | None = None) -> ExprList:
    """A user message around `expr`."""
    return role_expr("user", expr)


def assistant(expr: Expr | str | None = None) -> ExprList:
    """An assistant message around `expr`."""
    return role_expr("assistant", expr)


def system_begin() -> Expr:
    return RoleBegin("system")


def system_end() -> Expr:
    return RoleEnd("system")


def user_begin() -> Expr:
    return RoleBegin("user")


def user_end() -> Expr:
    return RoleEnd("user")


def assistant_begin() -> Expr:
    return RoleBegin("assistant")


def assistant_end() -> Expr:
    return RoleEnd("assistant")
