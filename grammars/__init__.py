"""Constraint compilers and token-mask matchers: JSON Schema, regex, lark EBNF and choices."""

from grammars.compiler import GrammarCompiler, warm_up
from grammars.errors import GrammarError
from grammars.grammar import CompiledGrammar, GrammarMatcher
from grammars.tokenizer_info import TokenizerInfo

__all__ = [
    "CompiledGrammar",
    "GrammarCompiler",
    "GrammarError",
    "GrammarMatcher",
    "TokenizerInfo",
    "warm_up",
]
