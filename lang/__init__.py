"""The radixgen frontend DSL: SGLang frontend programs run unchanged with
`import lang as sgl`. Programs are plain Python functions whose prompts, generations,
choices and forks become requests to a server that shares their prefixes in its radix cache.
Importing this package loads no torch and no server code."""

from lang.api import (
    assistant,
    assistant_begin,
    assistant_end,
    flush_cache,
    function,
    gen,
    gen_int,
    gen_string,
    get_server_info,
    image,
    select,
    set_default_backend,
    system,
    system_begin,
    system_end,
    user,
    user_begin,
    user_end,
)
from lang.backend.openai import OpenAI
from lang.backend.runtime import Runtime
from lang.backend.runtime_endpoint import RuntimeEndpoint
from lang.choices import (
    ChoicesDecision,
    ChoicesSamplingMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from lang.errors import AuthenticationError, BackendError, LangError, UnsupportedFeatureError
from lang.function import SglFunction
from lang.global_config import global_config
from lang.state import ProgramState, ProgramStateGroup

__all__ = [
    "AuthenticationError",
    "BackendError",
    "ChoicesDecision",
    "ChoicesSamplingMethod",
    "LangError",
    "OpenAI",
    "ProgramState",
    "ProgramStateGroup",
    "Runtime",
    "RuntimeEndpoint",
    "SglFunction",
    "UnsupportedFeatureError",
    "assistant",
    "assistant_begin",
    "assistant_end",
    "flush_cache",
    "function",
    "gen",
    "gen_int",
    "gen_string",
    "get_server_info",
    "global_config",
    "greedy_token_selection",
    "image",
    "select",
    "set_default_backend",
    "system",
    "system_begin",
    "system_end",
    "token_length_normalized",
    "unconditional_likelihood_normalized",
    "user",
    "user_begin",
    "user_end",
]
