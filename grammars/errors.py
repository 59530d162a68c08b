"""Errors raised while compiling constraints."""


class GrammarError(ValueError):
    """A schema, regex or grammar the engine cannot honour; the message names the keyword."""

    def __init__(self, *args):
        super().__init__(*(encodable(a) if isinstance(a, str) else a for a in args))


def encodable(text: str) -> str:
    """`text` with the characters UTF-8 cannot encode (lone surrogates, from a schema's keys
    or values) written as escapes, so that a message can be printed and sent as JSON."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class GrammarTimeout(GrammarError):
    """Compiling took longer than the CompileBudget's timeout."""


class GrammarCancelled(GrammarError):
    """The CompileBudget's cancel event was set while compiling."""
