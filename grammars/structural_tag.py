"""Structural tags (the `structural_tag` of xgrammar and SGLang): free text in which each
trigger opens a constrained structure.

    {"structures": [{"begin": "<tool_call>", "schema": {...}, "end": "</tool_call>"}, ...],
     "triggers": ["<tool_call>"]}

The text is free until a trigger appears; from the trigger on it must be the `begin` of one
structure that starts with that trigger, a JSON document valid against its `schema`, and its
`end`; then it is free again. Free text never contains a trigger anywhere else, so the whole
language is one grammar: (F S)* F, where F is any text without a trigger and S any structure.
"""

from __future__ import annotations

import json

from grammars.automaton import ALL_BYTES, alt, cat, difference, lit, rep
from grammars.errors import GrammarError

MAX_STRUCTURES = 1024
MAX_TRIGGERS = 64


def parse_structural_tag(tag) -> tuple[list[tuple[str, object, str]], list[str]]:
    """([(begin, schema, end)], triggers) of a tag given as a dict or JSON text; GrammarError
    naming what is wrong."""
    if isinstance(tag, str):
        try:
            tag = json.loads(tag)
        except ValueError as exc:
            raise GrammarError(f"not valid JSON: {exc}") from None
    if not isinstance(tag, dict):
        raise GrammarError("must be an object with structures and triggers")
    unknown = sorted(set(tag) - {"type", "structures", "triggers"})
    if unknown:
        raise GrammarError(f"unknown field(s) {unknown}")
    structures, triggers = tag.get("structures"), tag.get("triggers")
    if not isinstance(structures, list) or not 1 <= len(structures) <= MAX_STRUCTURES:
        raise GrammarError(f"structures: a list of 1 to {MAX_STRUCTURES} objects")
    if not isinstance(triggers, list) or not 1 <= len(triggers) <= MAX_TRIGGERS:
        raise GrammarError(f"triggers: a list of 1 to {MAX_TRIGGERS} strings")
    if not all(isinstance(t, str) and t for t in triggers):
        raise GrammarError("triggers: each trigger is a non-empty string")
    parsed = []
    for i, s in enumerate(structures):
        where = f"structures[{i}]"
        if not isinstance(s, dict) or set(s) - {"begin", "schema", "end"}:
            raise GrammarError(f"{where}: an object with begin, schema and end")
        begin, schema, end = s.get("begin"), s.get("schema", {}), s.get("end", "")
        if not isinstance(begin, str) or not isinstance(end, str):
            raise GrammarError(f"{where}: begin and end are strings")
        if not isinstance(schema, (dict, bool)):
            raise GrammarError(f"{where}.schema: a JSON schema object")
        if not any(begin.startswith(t) for t in triggers):
            raise GrammarError(f"{where}.begin {begin!r} does not start with any trigger")
        parsed.append((begin, schema, end))
    return parsed, list(triggers)


def structural_tag_rules(tag, schema_rules) -> tuple[dict, str]:
    """(rules, root) of the tag; `schema_rules(schema)` gives (rules, root) of one schema."""
    structures, triggers = parse_structural_tag(tag)
    rules: dict[str, tuple] = {}
    bodies = []
    for i, (begin, schema, end) in enumerate(structures):
        try:
            sub_rules, sub_root = schema_rules(schema)
        except GrammarError as exc:
            raise GrammarError(f"structures[{i}].schema: {exc}") from None
        prefix = f"s{i}:"
        rules.update({prefix + name: _renamed(node, prefix) for name, node in sub_rules.items()})
        bodies.append(cat(lit(begin), ("nt", prefix + sub_root), lit(end)))
    anything = rep(("b", ALL_BYTES))
    free = difference(anything, cat(anything, alt(*(lit(t) for t in triggers)), anything))
    rules["__tag__"] = cat(rep(cat(free, alt(*bodies))), free)
    return rules, "__tag__"


def _renamed(node: tuple, prefix: str) -> tuple:
    """`node` with every rule reference prefixed (so several schemas share one rule table)."""
    kind = node[0]
    if kind == "nt":
        return ("nt", prefix + node[1])
    if kind in ("cat", "alt"):
        return (kind, tuple(_renamed(n, prefix) for n in node[1]))
    if kind == "rep":
        return ("rep", _renamed(node[1], prefix), node[2], node[3])
    if kind == "frag":
        return ("frag", _renamed(node[1], prefix))
    if kind == "members":
        _, items, sep, extra, counts, any_order, needs = node
        return (
            "members",
            tuple((_renamed(n, prefix), required) for n, required in items),
            _renamed(sep, prefix),
            None if extra is None else _renamed(extra, prefix),
            counts,
            any_order,
            needs,
        )
    return node  # bytes and embedded DFAs hold no references
