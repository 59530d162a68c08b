"""Exact checks of one JSON value against a schema, for the constants of const / enum.

A constant is kept only where every keyword beside it also holds for it. Deciding that on the
value itself needs no automaton of those keywords, so a constant beside a keyword the engine
cannot build (an overlapping oneOf, a `not` of a recursive schema) still compiles. `matches`
answers True or False only where it is sure, and None where it cannot decide exactly: a keyword
it does not know, a format whose automaton is a restriction, a $ref it cannot resolve.

Values compare as JSON does: 1 == 1.0, true != 1; numbers are read as the decimals they are
written as (multipleOf and bounds exact, never in binary floating point); lengths count code
points. Patterns and formats are matched by the engine's own automata, so a constant is judged
by the same reading of a pattern as the strings around it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Callable
from fractions import Fraction

from grammars.automaton import NFA, EagerDFA
from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.json_schema.core import _json_type
from grammars.json_schema.strings import (
    _DOMAIN_FORMATS,
    _FORMATS,
    _SUBSET_FORMATS,
    _UNENFORCED_FORMATS,
    RESTRICTED_FORMATS,
    _format_dfa,
)
from grammars.regex import regex_to_node

MAX_DEPTH = 200  # schemas entered for one value (a $ref to itself never ends)
_UNDECIDED_KEYWORDS = frozenset(
    {"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"}
)
_TYPES = frozenset({"null", "boolean", "object", "array", "string", "number", "integer"})
# keywords one draft defines and another ignores (the drafts: "2020-12", "2019-09", "older"),
# with the type of the values they judge
_LATER = frozenset({"2019-09", "2020-12"})
_KEYWORD_DRAFTS = {
    "prefixItems": ("array", frozenset({"2020-12"})),
    "minContains": ("array", _LATER),
    "maxContains": ("array", _LATER),
    "dependentRequired": ("object", _LATER),
    "dependentSchemas": ("object", _LATER),
    "dependencies": ("object", frozenset({"older", "draft-04"})),
}


def matches(
    value,
    schema,
    resolve: Callable,
    *,
    strict: bool = False,
    ref_siblings: bool = True,
    draft: str = "2020-12",
) -> bool | None:
    """Whether the JSON value `value` matches `schema`: True, False, or None where that cannot
    be decided exactly. `resolve(ref)` returns (target, key) as _Builder.resolve does; `strict`
    forbids unnamed properties and items beyond prefixItems (the compile option);
    `ref_siblings` False ignores keywords beside $ref (drafts before 2019-09). A keyword that
    `draft` ("2020-12", "2019-09", "draft-04" or "older") does not define leaves the value undecided: the
    engine reads it all the same, a restriction that would turn into admitting invalid values
    under `not`."""
    foreign = {k: kind for k, (kind, drafts) in _KEYWORD_DRAFTS.items() if draft not in drafts}
    exact = _Matcher(resolve, False, ref_siblings, foreign).check(value, schema, 0)
    if not strict or exact is False:
        return exact
    # strict narrows what the schema admits, but under not or oneOf it would widen it: a value
    # is kept only where it matches both readings
    narrowed = _Matcher(resolve, True, ref_siblings, foreign).check(value, schema, 0)
    return _all([exact, narrowed])


def json_key(value):
    """A hashable key, equal for two values exactly when they are equal as JSON values."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)  # Python compares int and float exactly: 1 == 1.0
    if isinstance(value, list):
        return ("array", tuple(map(json_key, value)))
    if isinstance(value, dict):
        return ("object", frozenset((k, json_key(v)) for k, v in value.items()))
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _equal(a, b) -> bool | None:
    """JSON equality; None where either is not a JSON value."""
    try:
        return json_key(a) == json_key(b)
    except TypeError:
        return None


def _all(results) -> bool | None:
    """Three-valued and: False as soon as one is False."""
    return _settled(results, False)


def _any(results) -> bool | None:
    """Three-valued or: True as soon as one is True."""
    return _settled(results, True)


def _settled(results, decisive: bool) -> bool | None:
    """`decisive` as soon as one result is; otherwise None if one is unknown, else its
    opposite."""
    out = not decisive
    for r in results:
        if r is decisive:
            return decisive
        if r is None:
            out = None
    return out


def _kind(value) -> str:
    """The JSON type of a value, integers among the numbers (as "type" reads them)."""
    t = _json_type(value)
    return "number" if t == "integer" else t


def _number(value) -> Fraction | None:
    """The exact value of a number as written (a float read as its shortest repr, which is how
    json.dumps writes it); None for anything else and for infinities."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        return Fraction(repr(value)) if math.isfinite(value) else None
    return Fraction(value)


def _count(arg) -> int | None:
    """A non-negative integer keyword argument (2.0 counts as 2); None if malformed."""
    if isinstance(arg, float) and arg.is_integer():
        arg = int(arg)
    if isinstance(arg, bool) or not isinstance(arg, int) or arg < 0:
        return None
    return arg


class _Matcher:
    def __init__(self, resolve: Callable, strict: bool, ref_siblings: bool, foreign: dict):
        self.resolve, self.strict, self.ref_siblings = resolve, strict, ref_siblings
        self.foreign = foreign  # keywords of another draft -> the type they judge

    def check(self, value, schema, depth: int) -> bool | None:
        if schema is True:
            return True
        if schema is False:
            return False
        if not isinstance(schema, dict) or depth >= MAX_DEPTH:
            return None
        checkpoint()
        kind = _kind(value)
        depth += 1
        if "$ref" in schema and not self.ref_siblings:
            return self._ref(value, schema["$ref"], depth)
        if any(self.foreign.get(k) == kind for k in schema):
            return None
        results = []
        done = set()  # a handler reads all its keywords at once (minimum and maximum)
        for key in schema:
            if key in _UNDECIDED_KEYWORDS:
                return None
            handler = _GENERAL.get(key) or _BY_TYPE.get(kind, {}).get(key)
            if handler is None or handler in done:
                continue
            done.add(handler)
            result = handler(self, value, schema, depth)
            if result is False:
                return False
            results.append(result)
        return _all(results)

    def _ref(self, value, ref, depth: int) -> bool | None:
        try:
            target, _ = self.resolve(ref)
        except GrammarError:
            return None
        return self.check(value, target, depth)

    # -- keywords for every type --
    def ref(self, value, schema, depth):
        return self._ref(value, schema["$ref"], depth)

    def type(self, value, schema, depth):
        t = schema["type"]
        types = [t] if isinstance(t, str) else t
        if not isinstance(types, list) or not all(x in _TYPES for x in types):
            return None
        kind = _kind(value)
        if kind in types:
            return True
        x = _number(value)
        return "integer" in types and x is not None and x.denominator == 1

    def const(self, value, schema, depth):
        return _equal(value, schema["const"])

    def enum(self, value, schema, depth):
        members = schema["enum"]
        if not isinstance(members, list):
            return None
        return _any(_equal(value, m) for m in members)

    def all_of(self, value, schema, depth):
        subs = schema["allOf"]
        if not isinstance(subs, list):
            return None
        return _all(self.check(value, s, depth) for s in subs)

    def any_of(self, value, schema, depth):
        subs = schema["anyOf"]
        if not isinstance(subs, list) or not subs:
            return None
        return _any(self.check(value, s, depth) for s in subs)

    def one_of(self, value, schema, depth):
        return self._one_of(value, schema["oneOf"], depth)

    def _one_of(self, value, subs, depth):
        if not isinstance(subs, list) or not subs:
            return None
        found = [self.check(value, s, depth) for s in subs]
        hits = found.count(True)
        if hits > 1:
            return False
        if None in found:
            return None
        return hits == 1

    def negation(self, value, schema, depth):
        result = self.check(value, schema["not"], depth)
        return None if result is None else not result

    def condition(self, value, schema, depth):
        then, otherwise = schema.get("then", True), schema.get("else", True)
        holds = self.check(value, schema["if"], depth)
        if holds is None:  # both outcomes alike still decide
            a, b = self.check(value, then, depth), self.check(value, otherwise, depth)
            return a if a == b else None
        return self.check(value, then if holds else otherwise, depth)

    def alternatives(self, value, schema, depth):
        """Groups of anyOf / oneOf branches left by merging allOf (_merge): each must hold."""
        results = []
        for kind, branches in schema["__alternatives"]:
            if kind == "oneOf":
                results.append(self._one_of(value, branches, depth))
            else:
                results.append(self.any_of(value, {"anyOf": branches}, depth))
        return _all(results)

    # -- numbers --
    def bound(self, value, schema, depth):
        """minimum, maximum and the exclusive ones (booleans in draft 4, numbers after)."""
        x = _number(value)
        if x is None:
            return None
        results = []
        for name, exclusive, below in (
            ("minimum", "exclusiveMinimum", False),
            ("maximum", "exclusiveMaximum", True),
        ):
            limit, flag = schema.get(name), schema.get(exclusive)
            checks = []
            if limit is not None:
                checks.append((limit, flag is True))
            if flag is not None and not isinstance(flag, bool):
                checks.append((flag, True))
            for arg, strictly in checks:
                bound = _number(arg)
                if bound is None:
                    return None
                if below:
                    results.append(x < bound if strictly else x <= bound)
                else:
                    results.append(x > bound if strictly else x >= bound)
        return all(results)

    def multiple_of(self, value, schema, depth):
        x, k = _number(value), _number(schema["multipleOf"])
        if x is None or k is None or k <= 0:
            return None
        return (x / k).denominator == 1

    # -- strings --
    def length(self, value, schema, depth):
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        lo, hi = _count(lo), None if hi is None else _count(hi)
        if lo is None or ("maxLength" in schema and hi is None):
            return None
        n = len(value)
        return n >= lo and (hi is None or n <= hi)

    def pattern(self, value, schema, depth):
        patterns = list(schema.get("__patterns", ()))
        if "pattern" in schema:
            patterns.append(schema["pattern"])
        return _all(pattern_search(p, value) for p in patterns)

    def format(self, value, schema, depth):
        return format_matches(schema["format"], value)

    # -- arrays --
    def items(self, value, schema, depth):
        """prefixItems / items / additionalItems, read as _ContainerNodes.array_node does."""
        prefix, items = schema.get("prefixItems"), schema.get("items")
        rest = items
        if isinstance(items, list):  # draft 4-2019 tuple form
            prefix, rest = items, schema.get("additionalItems")
        prefix = prefix or []
        if not isinstance(prefix, list):
            return None
        if rest is None:
            rest = not (self.strict and prefix)
        subs = [*prefix[: len(value)], *[rest] * max(len(value) - len(prefix), 0)]
        return _all(self.check(v, s, depth) for v, s in zip(value, subs))

    def item_count(self, value, schema, depth):
        lo, hi = _count(schema.get("minItems", 0)), schema.get("maxItems")
        hi = None if hi is None else _count(hi)
        if lo is None or ("maxItems" in schema and hi is None):
            return None
        return len(value) >= lo and (hi is None or len(value) <= hi)

    def unique(self, value, schema, depth):
        flag = schema["uniqueItems"]
        if not isinstance(flag, bool):
            return None
        return not flag or len(set(map(json_key, value))) == len(value)

    def contains(self, value, schema, depth):
        lo = _count(schema.get("minContains", 1))
        hi = schema.get("maxContains")
        hi = None if hi is None else _count(hi)
        if lo is None or ("maxContains" in schema and hi is None):
            return None
        if lo == 0 and hi is None:
            return True
        found = [self.check(v, schema["contains"], depth) for v in value]
        hits, unknown = found.count(True), found.count(None)
        if hits + unknown < lo or (hi is not None and hits > hi):
            return False
        if unknown:
            return None
        return True

    # -- objects --
    def members(self, value, schema, depth):
        """properties / patternProperties / additionalProperties, as object_node reads them."""
        props = schema.get("properties") or {}
        patterns = schema.get("patternProperties") or {}
        additional = schema.get("additionalProperties")
        if additional is None:
            additional = not self.strict
        if not isinstance(props, dict) or not isinstance(patterns, dict):
            return None
        results = []
        for name, member in value.items():
            subs = [props[name]] if name in props else []
            for pattern, sub in patterns.items():
                found = pattern_search(pattern, name)
                if found is None:
                    return None
                if found:
                    subs.append(sub)
            if not subs:
                subs = [additional]
            results.append(_all(self.check(member, s, depth) for s in subs))
            if results[-1] is False:
                return False
        return _all(results)

    def required(self, value, schema, depth):
        names = schema["required"]
        if not isinstance(names, list):
            return None
        return all(n in value for n in names)

    def property_count(self, value, schema, depth):
        lo, hi = _count(schema.get("minProperties", 0)), schema.get("maxProperties")
        hi = None if hi is None else _count(hi)
        if lo is None or ("maxProperties" in schema and hi is None):
            return None
        return len(value) >= lo and (hi is None or len(value) <= hi)

    def property_names(self, value, schema, depth):
        return _all(self.check(name, schema["propertyNames"], depth) for name in value)

    def dependencies(self, value, schema, depth):
        results = []
        for key in ("dependencies", "dependentRequired", "dependentSchemas"):
            deps = schema.get(key)
            if deps is None:
                continue
            if not isinstance(deps, dict):
                return None
            for name, dep in deps.items():
                if name not in value:
                    continue
                if isinstance(dep, list):
                    results.append(all(n in value for n in dep))
                else:
                    results.append(self.check(value, dep, depth))
        return _all(results)


_GENERAL = {
    "$ref": _Matcher.ref,
    "type": _Matcher.type,
    "const": _Matcher.const,
    "enum": _Matcher.enum,
    "allOf": _Matcher.all_of,
    "anyOf": _Matcher.any_of,
    "oneOf": _Matcher.one_of,
    "not": _Matcher.negation,
    "if": _Matcher.condition,
    "__alternatives": _Matcher.alternatives,
}
_BY_TYPE = {
    "number": {
        **dict.fromkeys(("minimum", "maximum"), _Matcher.bound),
        **dict.fromkeys(("exclusiveMinimum", "exclusiveMaximum"), _Matcher.bound),
        "multipleOf": _Matcher.multiple_of,
    },
    "string": {
        **dict.fromkeys(("minLength", "maxLength"), _Matcher.length),
        **dict.fromkeys(("pattern", "__patterns"), _Matcher.pattern),
        "format": _Matcher.format,
    },
    "array": {
        **dict.fromkeys(("items", "prefixItems", "additionalItems"), _Matcher.items),
        **dict.fromkeys(("minItems", "maxItems"), _Matcher.item_count),
        "uniqueItems": _Matcher.unique,
        "contains": _Matcher.contains,
    },
    "object": {
        **dict.fromkeys(
            ("properties", "patternProperties", "additionalProperties"), _Matcher.members
        ),
        "required": _Matcher.required,
        **dict.fromkeys(("minProperties", "maxProperties"), _Matcher.property_count),
        "propertyNames": _Matcher.property_names,
        **dict.fromkeys(
            ("dependencies", "dependentRequired", "dependentSchemas"), _Matcher.dependencies
        ),
    },
}


def _inside(text: str) -> bytes | None:
    """The inside of the JSON string of `text` (characters as themselves where JSON allows);
    None for a lone surrogate, which no string automaton reads."""
    if any("\ud800" <= c <= "\udfff" for c in text):
        return None
    return json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8")


def pattern_search(pattern, text: str) -> bool | None:
    """JSON Schema's `pattern` on `text`, read by the engine's regex automaton (string_node's);
    None where the engine refuses the pattern or the text."""
    data = _inside(text)
    if data is None or not isinstance(pattern, str):
        return None
    try:
        nfa = _pattern_nfa(pattern)
    except GrammarError:
        return None
    return _nfa_accepts(nfa, data)


@functools.lru_cache(maxsize=256)
def _pattern_nfa(pattern: str) -> tuple[NFA, int, int]:
    nfa = NFA()
    s, e = nfa.new(), nfa.new()
    nfa.build(regex_to_node(pattern, json_mode=True, search=True), s, e)
    return nfa, s, e


def _nfa_accepts(machine: tuple[NFA, int, int], data: bytes) -> bool:
    """The NFA reads `data` whole (a set of states at a time: linear in the text)."""
    nfa, s, e = machine
    states = nfa.closure([s])
    for i, b in enumerate(data):
        if not i & 1023:
            checkpoint()
        states = nfa.closure({t for n in states for m, t in nfa.edges_of(n) if m >> b & 1})
        if not states:
            return False
    return e in states


def format_matches(fmt, text: str) -> bool | None:
    """`format` on `text`: an unknown format is an annotation (True); None where the engine's
    automaton refuses valid values (docs/grammars.md) and refuses this one, or where the
    format is not enforced at all."""
    if not isinstance(fmt, str) or fmt in _UNENFORCED_FORMATS:
        return None if fmt in _UNENFORCED_FORMATS else True
    engine_fmt = _SUBSET_FORMATS.get(fmt, fmt)
    if engine_fmt not in _FORMATS and engine_fmt not in _DOMAIN_FORMATS:
        return True
    data = _inside(text)
    if data is None:
        return None
    if _format_machine(engine_fmt).accepts(data):
        return True
    return None if fmt in RESTRICTED_FORMATS else False


@functools.lru_cache(maxsize=32)
def _format_machine(fmt: str) -> EagerDFA:
    dfa = _format_dfa(fmt)
    return EagerDFA(dfa.trans, dfa.accept, dfa.start)  # its moves listed once


def finite_values(
    schema, resolve: Callable, *, ref_siblings: bool = True, limit: int = 1000
) -> list | None:
    """Values that include every value `schema` matches, where const / enum bound them: its
    own constants, those of an allOf member or of every anyOf / oneOf branch, through $ref
    (the other keywords are not read: `matches` judges each value). Distinct as JSON values;
    None where no such list of at most `limit` values is found."""
    found = _finite(schema, resolve, ref_siblings, 0)
    if found is None:
        return None
    distinct: dict = {}
    for value in found:
        try:
            distinct.setdefault(json_key(value), value)
        except TypeError:
            return None
        if len(distinct) > limit:
            return None
    return list(distinct.values())


def _finite(schema, resolve: Callable, ref_siblings: bool, depth: int) -> list | None:
    if schema is False:
        return []
    if not isinstance(schema, dict) or depth >= MAX_DEPTH:
        return None
    if "$ref" in schema and not ref_siblings:
        schema = {"$ref": schema["$ref"]}
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return schema["enum"]
    depth += 1
    members = list(schema.get("allOf") or [])
    if "$ref" in schema:
        with contextlib.suppress(GrammarError):  # (reported where the schema is built)
            members.append(resolve(schema["$ref"])[0])
    for sub in members:
        found = _finite(sub, resolve, ref_siblings, depth)
        if found is not None:
            return found
    groups = [schema[k] for k in ("anyOf", "oneOf") if isinstance(schema.get(k), list)]
    groups += [branches for _, branches in schema.get("__alternatives") or []]
    for branches in groups:
        union = []
        for branch in branches:
            found = _finite(branch, resolve, ref_siblings, depth)
            if found is None:
                break
            union.extend(found)
        else:
            return union
    return None
