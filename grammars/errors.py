"""Errors raised while compiling constraints."""


class GrammarError(ValueError):
    """A schema, regex or grammar the engine cannot honour; the message names the keyword."""


class GrammarTimeout(GrammarError):
    """Compiling took longer than the CompileBudget's timeout."""


class GrammarCancelled(GrammarError):
    """The CompileBudget's cancel event was set while compiling."""
