"""What the interpreter asks of a backend. A backend that cannot do something raises
`UnsupportedFeatureError` naming it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lang.chat_template import ChatTemplate
from lang.errors import UnsupportedFeatureError

if TYPE_CHECKING:
    from lang.choices import ChoicesDecision, ChoicesSamplingMethod
    from lang.executor import StreamExecutor
    from lang.ir import SamplingParams

Meta = dict[str, Any]


class BaseBackend:
    """Executes the model calls of programs; `name` appears in error messages."""

    name = "base"

    def get_chat_template(self) -> ChatTemplate:
        """The role affixes programs render their messages with."""
        return ChatTemplate.plain()

    def cache_prefix(self, text: str) -> None:
        """Put `text` into the server's prefix cache (no-op where there is none)."""

    def commit_prefix(self, s: StreamExecutor) -> None:
        """Make the state's text so far reusable by its forks (no-op by default)."""

    def generate(self, s: StreamExecutor, params: SamplingParams) -> tuple[Any, Meta | list]:
        """Text generated after the state's prompt, and the server's meta info."""
        raise UnsupportedFeatureError("gen", self.name)

    def generate_stream(
        self, s: StreamExecutor, params: SamplingParams
    ) -> Iterator[tuple[str, Meta]]:
        """Pieces of generated text as they arrive, each with the meta info so far."""
        raise UnsupportedFeatureError("streaming", self.name)

    def select(
        self,
        s: StreamExecutor,
        choices: list[str],
        temperature: float,
        choices_method: ChoicesSamplingMethod,
    ) -> ChoicesDecision:
        """One of `choices`, picked by `choices_method`."""
        raise UnsupportedFeatureError("select", self.name)

    def fill_image(self, s: StreamExecutor, path: str) -> None:
        """Add an image to the prompt."""
        raise UnsupportedFeatureError(
            "image", self.name, "the served model has no vision input; remove sgl.image(...)"
        )

    def flush_cache(self) -> None:
        """Empty the server's prefix cache."""
        raise UnsupportedFeatureError("flush_cache", self.name)

    def get_server_info(self) -> dict:
        """The server's description of itself."""
        raise UnsupportedFeatureError("get_server_info", self.name)

    def end_program(self, s: StreamExecutor) -> None:
        """Called when a program state ends (nothing to release by default)."""
