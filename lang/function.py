"""`@sgl.function` programs and how they run: `run` (one program; generations go out as they
are reached), `run_batch` (a thread pool, with the traced constant prefix cached first),
`trace` and `bind`."""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lang.backend.base import BaseBackend
from lang.executor import StreamExecutor
from lang.global_config import global_config
from lang.ir import SamplingParams, run_defaults
from lang.state import ProgramState
from lang.tracer import cache_program, trace_program

logger = logging.getLogger(__name__)

# Options of run/run_batch that become the default sampling parameters of every gen (SGLang's
# run signature: n and min_new_tokens are options of a gen only).
_SAMPLING_OPTIONS = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "ignore_eos",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "return_text_in_logprobs",
)


class SglFunction:
    """A program: a Python function whose first parameter is the state `s`."""

    def __init__(
        self,
        func: Callable,
        num_api_spec_tokens: int | None = None,
        bind_arguments: dict | None = None,
    ):
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens  # accepted; there is no API speculation
        self.bind_arguments = dict(bind_arguments or {})
        params = list(inspect.signature(func).parameters.values())
        if not params:
            raise TypeError(f"{func.__name__}: a program's first parameter must be the state s")
        self.arg_names = [p.name for p in params[1:]]
        self.required_args = [p.name for p in params[1:] if p.default is inspect.Parameter.empty]
        self.__name__ = getattr(func, "__name__", "program")
        self.__doc__ = func.__doc__

    def bind(self, **kwargs: Any) -> SglFunction:
        """A copy of this program with some arguments fixed."""
        unknown = [k for k in kwargs if k not in self.arg_names]
        if unknown:
            raise TypeError(f"{self.__name__} has no arguments {unknown}")
        return SglFunction(self.func, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    def run(
        self, *args: Any, stream: bool = False, backend: Any = None, **kwargs: Any
    ) -> ProgramState:
        """Run the program once. Keyword options named like sampling parameters
        (max_new_tokens, temperature, stop, ...) are defaults for its generations; the others
        are the program's arguments. With `stream=True` it returns at once and
        `state.text_iter()` follows the text."""
        defaults, program_kwargs = _split_options(kwargs)
        return run_program(self, resolve_backend(backend), args, program_kwargs, defaults, stream)

    def run_batch(
        self,
        batch_kwargs: list,
        *,
        backend: Any = None,
        num_threads: str | int = "auto",
        progress_bar: bool = False,
        **options: Any,
    ) -> list[ProgramState]:
        """Run the program once per argument dict (or tuple), concurrently on `num_threads`
        threads; the states come back in input order."""
        defaults, unknown = _split_options(options)
        if unknown:
            raise TypeError(f"run_batch got unknown options {sorted(unknown)}")
        batch = [self._as_kwargs(item) for item in batch_kwargs]
        return run_program_batch(
            self, resolve_backend(backend), batch, defaults, num_threads, progress_bar
        )

    def trace(self, *, backend: Any = None, **kwargs: Any):
        """Record the program's expressions without calling a model; arguments not given
        become placeholders."""
        backend = backend or global_config.default_backend
        return trace_program(self, kwargs, getattr(backend, "endpoint", backend))

    def cache(self, backend: Any = None) -> str:
        """Put the program's constant prefix into the server's prefix cache."""
        return cache_program(self, resolve_backend(backend))

    def __call__(self, *args: Any, **kwargs: Any) -> ProgramState:
        return self.run(*args, **kwargs)

    def _as_kwargs(self, item: Any) -> dict:
        if isinstance(item, dict):
            return item
        if isinstance(item, (list, tuple)) and len(item) <= len(self.arg_names):
            return dict(zip(self.arg_names, item))
        raise TypeError(f"{self.__name__}: batch items must be dicts or argument tuples")


def _split_options(kwargs: dict) -> tuple[SamplingParams, dict]:
    """(the run defaults with the sampling options in `kwargs`, the remaining kwargs)."""
    options = {k: kwargs[k] for k in _SAMPLING_OPTIONS if k in kwargs}
    rest = {k: v for k, v in kwargs.items() if k not in _SAMPLING_OPTIONS}
    return run_defaults(**options), rest


def resolve_backend(backend: Any) -> BaseBackend:
    """The given backend, else the default one; a Runtime serves through its endpoint."""
    backend = backend or global_config.default_backend
    if backend is None:
        raise ValueError("no backend: call sgl.set_default_backend(...) or pass backend=")
    return getattr(backend, "endpoint", backend)


def run_program(
    program: SglFunction,
    backend: BaseBackend,
    args: tuple,
    kwargs: dict,
    defaults: SamplingParams,
    stream: bool = False,
    raise_errors: bool = True,
) -> ProgramState:
    """Run `program` on a fresh state; blocks until done unless `stream`. Without
    `raise_errors` a failure stays in the state (`state.error()`)."""
    kwargs = {**kwargs, **program.bind_arguments}
    executor = StreamExecutor(backend, kwargs, defaults, stream=stream)
    state = ProgramState(executor)

    def body() -> None:
        try:
            state.ret_value = program.func(state, *args, **kwargs)
        finally:
            executor.end()

    if stream:
        executor.program_thread = threading.Thread(
            target=_logged(body), name="sgl-program", daemon=True
        )
        executor.program_thread.start()
        return state
    try:
        body()
    except Exception as e:
        if raise_errors:
            raise
        logger.warning("program %s failed: %s", program.__name__, e)
        executor.error_ = executor.error_ or e
    executor.sync()
    if raise_errors:
        executor.raise_error()
    return state


def _logged(body: Callable[[], None]) -> Callable[[], None]:
    """`body`, with an exception logged (a streaming program has no caller to raise to)."""

    def run() -> None:
        try:
            body()
        except Exception:
            logger.exception("streaming program failed")

    return run


def run_program_batch(
    program: SglFunction,
    backend: BaseBackend,
    batch: list[dict],
    defaults: SamplingParams,
    num_threads: str | int,
    progress_bar: bool,
) -> list[ProgramState]:
    """Run `program` once per kwargs dict; a failed program keeps its error in its state
    (`state.error()`) instead of stopping the batch."""
    if not batch:
        return []
    if global_config.enable_precache_with_tracing and len(batch) > 1:
        cache_program(program, backend)
    if num_threads == "auto":
        num_threads = max(96, (os.cpu_count() or 1) * 16)
    num_threads = max(1, min(int(num_threads), len(batch)))

    def one(kwargs: dict) -> ProgramState:
        return run_program(program, backend, (), kwargs, defaults, raise_errors=False)

    bar = _progress_bar(len(batch)) if progress_bar else None
    with ThreadPoolExecutor(num_threads, thread_name_prefix="sgl-batch") as pool:
        futures = [pool.submit(one, kwargs) for kwargs in batch]
        if bar is not None:
            for future in futures:
                future.add_done_callback(lambda _: bar.update())
        states = [f.result() for f in futures]
    if bar is not None:
        bar.close()
    return states


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total)
