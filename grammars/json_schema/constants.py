"""Constants: the values of const / enum, their grammar node, and how to tell two sets of them
apart.

Many scalar constants (a 50,000-member enum, an anyOf of consts) become one minimal DFA
(grammars.literal_set), built in time linear in their length; containers, and small sets, stay
an alternation of literals. Both spell every value exactly as _Builder.literal does.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from grammars.automaton import alt
from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.json_schema.core import _ANNOTATIONS, _constrains, _json_type, _types_of
from grammars.json_schema.numbers import integral_value, number_texts
from grammars.json_schema.strings import char_spellings, string_word
from grammars.literal_set import OverlappingSpellings, minimal_dfa

MIN_LITERAL_SET = 32  # fewer constants stay an alternation of literals
_CONSTANT_KEYWORDS = frozenset({"const", "enum", "type"})


def constant_values(schema: dict, path: str) -> list | None:
    """The values a schema with const or enum admits (const wins, as in _Builder.value; enum
    members of another "type" are dropped); None without either keyword."""
    if "const" in schema:
        return [schema["const"]]
    if "enum" not in schema:
        return None
    values = schema["enum"]
    if not isinstance(values, list):
        raise GrammarError(f"enum must be a list at {path}")
    types = _types_of(schema)
    if types is None:
        return values
    return [
        v
        for v in values
        if _json_type(v) in types or (_json_type(v) == "integer" and "number" in types)
    ]


def only_constants(schema) -> bool:
    """The schema is a const or an enum and nothing else (beside annotations and "type")."""
    return (
        isinstance(schema, dict)
        and ("const" in schema or "enum" in schema)
        and all(k in _CONSTANT_KEYWORDS or k in _ANNOTATIONS for k in schema)
    )


def constants_node(
    values: list, literal: Callable, path: str, integers_only: bool = False
) -> tuple:
    """Any one of `values`, each spelled as `literal(value, path)` spells it (many scalars as
    one minimal DFA of their texts: string_word, number_texts with `integers_only`)."""
    if len(values) < MIN_LITERAL_SET:
        return alt(*(literal(v, path) for v in values))
    words, containers = [], []
    try:
        for i, value in enumerate(values):
            if not i & 1023:
                checkpoint()
            if isinstance(value, str):
                words.append(string_word(value))
            elif value is None:
                words.append(tuple(b"null"))
            elif isinstance(value, (bool, int, float)):
                words.extend(
                    tuple(text.encode("ascii")) for text in number_texts(value, integers_only)
                )
            else:
                containers.append(literal(value, path))
        dfa = minimal_dfa(words, char_spellings)
    except OverlappingSpellings:  # not expected from JSON; an alternation stays correct
        return alt(*(literal(v, path) for v in values))
    return alt(("dfa", dfa), *containers)


def scalar_key(value):
    """Equal for two scalars exactly when their literals match the same texts (1 and 1.0 do,
    1 and true do not); None for arrays and objects."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, (int, float)):
        k = integral_value(value)
        return ("int", k) if k is not None else ("float", json.dumps(value))
    return None


def scalar_keys(schema) -> frozenset | None:
    """scalar_key of every constant the schema names (const / enum), None when it names none
    or one is an array or object."""
    if not isinstance(schema, dict):
        return None
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if not isinstance(values, list):
        return None
    keys = set()
    for value in values:
        key = scalar_key(value)
        if key is None:
            return None
        keys.add(key)
    return frozenset(keys)


def common_values(a, b) -> list:
    """The members of `a` equal to a member of `b` (as `in` compares them), in a's order:
    linear for scalars, where `x in b` for each x would be quadratic."""
    if not isinstance(a, list) or not isinstance(b, list):
        return [x for x in a if x in b]
    hashed, others = set(), []
    for x in b:
        try:
            hashed.add(x)
        except TypeError:  # arrays and objects
            others.append(x)
    out = []
    for i, x in enumerate(a):
        if not i & 1023:
            checkpoint()
        try:
            found = x in hashed
        except TypeError:
            checkpoint()
            found = x in others
        if found:
            out.append(x)
    return out


def beside_constants(schema: dict) -> dict | None:
    """The keywords beside const / enum that its constants must also match (a const's sibling
    enum among them); None where nothing but "type" stands beside an enum (constant_values has
    already dropped its members of other types)."""
    rest = {k: v for k, v in schema.items() if k != ("const" if "const" in schema else "enum")}
    if not _constrains(rest) or (set(rest) - _ANNOTATIONS == {"type"} and "const" not in schema):
        return None
    return rest


def spellings(value, separators, integers_only: bool) -> list[bytes]:
    """Usual JSON texts of a constant: with and without escapes, numbers as number_texts
    (`integers_only`: integral numbers as digits alone, as `literal` writes them then)."""
    if integers_only:
        value = _as_integers(value)
    texts = {json.dumps(value, ensure_ascii=True, separators=separators)}
    with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate: only its escape is JSON
        texts.add(json.dumps(value, ensure_ascii=False, separators=separators).encode())
    if isinstance(value, (int, float)):
        texts.update(number_texts(value, integers_only))
    return [t if isinstance(t, bytes) else t.encode() for t in texts]


def _as_integers(value):
    """`value` with its integral floats made integers (2.0 as 2)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_as_integers(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_integers(v) for k, v in value.items()}
    return value
