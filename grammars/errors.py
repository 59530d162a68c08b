"""Errors raised while compiling constraints."""


class GrammarError(ValueError):
    """A schema, regex or grammar the engine cannot honour; the message names the keyword."""
