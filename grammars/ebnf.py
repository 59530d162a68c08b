"""Grammars in lark's EBNF syntax to grammar rules, matched at the character level.

lark reads the grammar (EBNF operators, imports, terminal definitions); every terminal
becomes a byte-level automaton (string literals, or Python regexes with their flags) inlined
into the rules, and %ignore terminals may appear between any two symbols and around the text.
Direct left recursion (A: A x | y, as lark writes repetition) is rewritten to y x*; indirect
left recursion raises GrammarError.

A grammar never reaches the file system: %import serves lark's own standard library (common,
unicode, lark, python) from lark's package data and refuses every other module, so lark never
falls back to opening a file the user named.
"""

from __future__ import annotations

import pkgutil
import re

import numpy as np

from grammars.automaton import EMPTY, NOTHING, alt, cat, lit, rep
from grammars.budget import checkpoint, watching_calls
from grammars.errors import GrammarError
from grammars.regex import regex_to_node

# lark's common.lark writes these with look-arounds; the same languages without them
_COMMON = {"ESCAPED_STRING": r'"(\\.|[^"\\])*"', "_STRING_ESC_INNER": r'(\\.|[^"\\])*'}
_FLAGS = {"i": re.IGNORECASE, "s": re.DOTALL, "m": re.MULTILINE, "x": re.VERBOSE, "u": 0, "l": 0}
STDLIB = ("common", "unicode", "lark", "python")  # the grammars lark ships in lark/grammars/
_stdlib_texts: dict[str, str] = {}
MAX_NESTING = 100  # ( and [ nested deeper are refused before lark recurses into them
# what may hold brackets that do not nest: strings, regular expressions, comments (an
# unclosed one runs to the end of its line or text, so the scan never fails and stays linear)
_OPAQUE = re.compile(r'"(?:[^"\\\n]|\\.?)*"?|/(?![/*])(?:[^/\\]|\\.?)*/?|//[^\n]*', re.DOTALL)


def _import_stdlib(base_path, grammar_path: str) -> tuple[str, str]:
    """lark's import hook, asked first for every %import: (name, text) of a module of lark's
    standard library; GrammarError for anything else (an IOError would let lark go on to
    open files)."""
    module = grammar_path.removesuffix(".lark").replace("/", ".").replace("\\", ".")
    if base_path is not None or module not in STDLIB:
        shown = module if base_path is None else "." + module
        raise GrammarError(
            f"ebnf: %import {shown} is not allowed; only lark's standard library can be "
            f"imported ({', '.join(STDLIB)})"
        )
    text = _stdlib_texts.get(module)
    if text is None:
        data = pkgutil.get_data("lark", f"grammars/{module}.lark")
        text = _stdlib_texts[module] = data.decode("utf-8") if data else ""
    return f"<lark stdlib {module}>", text


def nesting_depth(text: str) -> int:
    """How deep ( and [ nest in a lark grammar (strings, regexps and comments left out)."""
    data = np.frombuffer(_OPAQUE.sub("", text).encode("utf-8", "surrogatepass"), np.uint8)
    steps = np.isin(data, (ord("("), ord("["))).astype(np.int64)
    steps -= np.isin(data, (ord(")"), ord("]")))
    return int(np.cumsum(steps).max(initial=0))


def lark_to_rules(text: str, start: str = "start") -> tuple[dict, str]:
    try:
        import lark
        from lark.grammar import NonTerminal
    except ImportError as exc:  # pragma: no cover - lark is a dependency
        raise GrammarError("EBNF grammars need the 'lark' package") from exc
    if nesting_depth(text) > MAX_NESTING:
        raise GrammarError(f"ebnf: parentheses or brackets nested more than {MAX_NESTING} deep")
    try:
        with watching_calls():  # lark's loops have no checkpoints (and some are exponential)
            parser = lark.Lark(
                text, start=start, parser="earley", lexer="dynamic", import_paths=[_import_stdlib]
            )
    except GrammarError:
        raise
    except Exception as exc:  # lark raises several error types for bad grammars
        raise GrammarError(f"ebnf: {type(exc).__name__}: {exc}".strip()) from None
    terminals = {t.name: t for t in parser.terminals}
    cache: dict[str, tuple] = {}

    def terminal(name: str) -> tuple:
        node = cache.get(name)
        if node is None:
            if name not in terminals:  # `%declare`d: lark leaves it to a custom lexer
                raise GrammarError(f"ebnf: terminal {name} is declared but never defined")
            pattern = terminals[name].pattern
            flags = 0
            for f in getattr(pattern, "flags", ()) or ():
                flags |= _FLAGS.get(f, 0)
            if name in _COMMON:
                node = regex_to_node(_COMMON[name])
            elif type(pattern).__name__ == "PatternStr" and not flags:
                node = lit(pattern.value)
            else:
                source = (
                    pattern.value
                    if type(pattern).__name__ == "PatternRE"
                    else re.escape(pattern.value)
                )
                node = regex_to_node(source, flags=flags)
            cache[name] = node
        return node

    ignore = alt(*(terminal(n) for n in parser.ignore_tokens)) if parser.ignore_tokens else None
    gap = rep(ignore, 0, None) if ignore is not None else EMPTY

    def symbol(sym) -> tuple:
        return ("nt", sym.name) if isinstance(sym, NonTerminal) else terminal(sym.name)

    def sequence(symbols) -> tuple:
        checkpoint()
        parts = []
        for i, sym in enumerate(symbols):
            if i:
                parts.append(gap)
            parts.append(symbol(sym))
        return cat(*parts)

    expansions: dict[str, list] = {}
    for rule in parser.rules:
        expansions.setdefault(rule.origin.name, []).append(list(rule.expansion))
    rules: dict[str, tuple] = {}
    for name, exps in expansions.items():
        recursive = [
            e[1:] for e in exps if e and isinstance(e[0], NonTerminal) and e[0].name == name
        ]
        base = [e for e in exps if not (e and isinstance(e[0], NonTerminal) and e[0].name == name)]
        node = alt(*(sequence(e) for e in base)) if base else NOTHING
        if recursive:
            tails = alt(*(cat(gap, sequence(e)) if e else EMPTY for e in recursive))
            node = cat(node, rep(tails, 0, None))
        rules[name] = node
    if start not in rules:
        raise GrammarError(f"ebnf: no rule named {start!r}")
    rules["__root__"] = cat(gap, ("nt", start), gap)
    return rules, "__root__"
