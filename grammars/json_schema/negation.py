"""`not` and `if`/`then`/`else` rewritten into positive schemas, where an exact rewrite exists.

complement(s) is a schema matching exactly the values `s` does not match, built from the
shapes negations take in practice: double negation, anyOf/allOf (De Morgan), an object shape
of properties and required names, and scalar constants. Anything else gives None, and the
builder falls back to its automaton difference or raises GrammarError.
"""

from __future__ import annotations

import functools

from grammars.automaton import byte_set
from grammars.json_schema.core import _ANNOTATIONS, _json_type, _types_of

_ALL = ["null", "boolean", "object", "array", "string", "number"]
_MAX_BRANCHES = 16  # alternatives one complement may add


def complement(schema):
    """A schema for the values `schema` rejects, or None where no exact rewrite is known."""
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        return None
    keys = {k: v for k, v in schema.items() if k not in _ANNOTATIONS and not k.startswith("x-")}
    if not keys:
        return False
    if set(keys) == {"not"}:
        return keys["not"]
    if set(keys) == {"anyOf"} and isinstance(keys["anyOf"], list):
        if all(isinstance(s, dict) and set(s) in ({"const"}, {"enum"}) for s in keys["anyOf"]):
            values = [v for s in keys["anyOf"] for v in s.get("enum", [s.get("const")])]
            return complement({"enum": values})  # one list: its complement is one branch
        parts = [complement(s) for s in keys["anyOf"]]
        return None if any(p is None for p in parts) else {"allOf": parts}
    if set(keys) == {"allOf"} and isinstance(keys["allOf"], list):
        parts = [complement(s) for s in keys["allOf"]]
        if any(p is None for p in parts) or len(parts) > _MAX_BRANCHES:
            return None
        return {"anyOf": parts}
    if set(keys) <= {"const", "enum", "type"} and ("const" in keys or "enum" in keys):
        return _other_scalars(keys)
    if set(keys) <= {"type", "properties", "required"}:
        return _other_objects(keys)
    return None


def _other_scalars(schema: dict):
    """Every value but the listed strings, booleans and nulls (numbers have spellings a
    literal does not list, "1.00" for 1, and containers are not split here: None)."""
    values = [schema["const"]] if "const" in schema else schema["enum"]
    if not isinstance(values, list):
        return None
    types = _types_of(schema)
    if types is not None:  # members of another type are dropped (as constant_values does)
        values = [v for v in values if _json_type(v) in types]
    kinds = {_json_type(v) for v in values}
    if kinds - {"string", "boolean", "null"}:
        return None
    branches = [{"type": [t for t in _ALL if t not in kinds]}]
    for t in sorted(kinds):
        branches.append({"type": t, "not": {"enum": [v for v in values if _json_type(v) == t]}})
    return {"anyOf": branches}


def _other_objects(schema: dict):
    """The values failing an object shape: non-objects where the shape names the type, and
    objects with a listed property of another value or a required one missing."""
    types = _types_of(schema)
    props = schema.get("properties") or {}
    required = schema.get("required") or []
    if not isinstance(props, dict) or not isinstance(required, list):
        return None
    if types is not None and types != ["object"]:
        return None
    branches = []
    if types is not None:
        branches.append({"type": [t for t in _ALL if t != "object"]})
    for name, sub in props.items():
        if sub is not True and sub != {}:
            branches.append(
                {"type": "object", "properties": {name: {"not": sub}}, "required": [name]}
            )
    branches += [{"type": "object", "properties": {name: False}} for name in required]
    if len(branches) > _MAX_BRANCHES:
        return None
    return {"anyOf": branches} if branches else False


def conditional(schema: dict) -> dict:
    """`if`/`then`/`else` as (if and then) or (not if and else), beside the other keywords."""
    rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
    if "then" not in schema and "else" not in schema:
        return rest  # an "if" alone asserts nothing
    cond = schema["if"]
    branches = [
        {"allOf": [cond, schema.get("then", True)]},
        {"allOf": [{"not": cond}, schema.get("else", True)]},
    ]
    return {"allOf": [rest, {"anyOf": branches}]}


@functools.lru_cache(maxsize=1)
def canonical_texts() -> tuple:
    """JSON texts in which every value has one spelling, so that an automaton difference
    (base minus negated) cannot let through another spelling of a negated value: strings
    without \\/ or \\u escapes, numbers without an exponent, a negative zero or a fraction
    ending in 0. A sound restriction on the base of a `not`."""
    from grammars.automaton import EagerDFA

    def b(chars: str) -> int:
        return byte_set(*map(ord, chars))

    digits, nonzero = byte_set((0x30, 0x39)), byte_set((0x31, 0x39))
    every = byte_set((0, 255))
    out_, in_, esc, neg, neg0, negfrac, int_, dot, frac0, frac = range(10)
    # outside strings: a quote opens one, '-' or a digit starts a number
    outside = [(b('"'), in_), (b("-"), neg), (digits, int_)]
    outside.append((every & ~b('"-') & ~digits, out_))
    ended = [(m & ~digits & ~b(".eE"), t) for m, t in outside if m & ~digits & ~b(".eE")]
    trans = [
        outside,
        [(b("\\"), esc), (b('"'), out_), (every & ~b('\\"'), in_)],
        [(b('"\\bfnrt'), in_)],  # no \/ and no \u
        [(b("0"), neg0), (nonzero, int_)],
        [(b("."), negfrac)],  # "-0" alone is a negative zero
        [(b("0"), negfrac), (nonzero, frac)],  # "-0.0..." too
        [(digits, int_), (b("."), dot)] + ended,
        [(b("0"), frac0), (nonzero, frac)],
        [(b("0"), frac0), (nonzero, frac)],  # a fraction may not end in 0
        [(b("0"), frac0), (nonzero, frac)] + ended,
    ]
    accept = [t in (out_, int_, frac) for t in range(10)]
    return ("dfa", EagerDFA(trans, accept, out_).trimmed())
