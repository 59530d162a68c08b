"""Constraint compilers and token-mask matchers: JSON Schema, regex, lark EBNF and choices."""

from grammars.budget import CompileBudget
from grammars.compiler import GrammarCompiler, build_machine, warm_up, warm_up_builds
from grammars.errors import GrammarCancelled, GrammarError, GrammarTimeout
from grammars.grammar import CompiledGrammar, GrammarMatcher
from grammars.tokenizer_info import TokenizerInfo

__all__ = [
    "CompileBudget",
    "CompiledGrammar",
    "GrammarCancelled",
    "GrammarCompiler",
    "GrammarError",
    "GrammarMatcher",
    "build_machine",
    "GrammarTimeout",
    "TokenizerInfo",
    "warm_up",
    "warm_up_builds",
]
