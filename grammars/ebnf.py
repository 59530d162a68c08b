"""Grammars in lark's EBNF syntax to grammar rules, matched at the character level.

lark reads the grammar (EBNF operators, imports, terminal definitions); every terminal
becomes a byte-level automaton (string literals, or Python regexes with their flags) inlined
into the rules, and %ignore terminals may appear between any two symbols and around the text.
Direct left recursion (A: A x | y, as lark writes repetition) is rewritten to y x*; indirect
left recursion raises GrammarError.
"""

from __future__ import annotations

import re

from grammars.automaton import EMPTY, NOTHING, alt, cat, lit, rep
from grammars.errors import GrammarError
from grammars.regex import regex_to_node

# lark's common.lark writes these with look-arounds; the same languages without them
_COMMON = {"ESCAPED_STRING": r'"(\\.|[^"\\])*"', "_STRING_ESC_INNER": r'(\\.|[^"\\])*'}
_FLAGS = {"i": re.IGNORECASE, "s": re.DOTALL, "m": re.MULTILINE, "x": re.VERBOSE, "u": 0, "l": 0}


def lark_to_rules(text: str, start: str = "start") -> tuple[dict, str]:
    try:
        import lark
        from lark.grammar import NonTerminal
    except ImportError as exc:  # pragma: no cover - lark is a dependency
        raise GrammarError("EBNF grammars need the 'lark' package") from exc
    try:
        parser = lark.Lark(text, start=start, parser="earley", lexer="dynamic")
    except Exception as exc:  # lark raises several error types for bad grammars
        raise GrammarError(f"ebnf: {type(exc).__name__}: {exc}".strip()) from None
    terminals = {t.name: t for t in parser.terminals}
    cache: dict[str, tuple] = {}

    def terminal(name: str) -> tuple:
        node = cache.get(name)
        if node is None:
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
