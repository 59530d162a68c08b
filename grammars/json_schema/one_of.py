"""oneOf: proofs that two branches share no value, and branches narrowed until they share none.

A oneOf is enforced as an anyOf of its branches, which is exact only when no value matches two
of them. Where that cannot be proved, the branches are narrowed (`separated_branches`) so that
every value a narrowed branch admits matches no other original branch: sound, and exact except
for the documented key restriction. Small regular branches that do overlap are made exclusive
by automaton differences instead (exclusive_dfas).

Branches that only say which keys an object holds: for a oneOf, one object schema per
presence pattern (presence_variants); for an anyOf of `required` lists, the key sets for one
object automaton that tracks which are still needed (needed_sets).
"""

from __future__ import annotations

from collections.abc import Callable

from grammars.automaton import EagerDFA
from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.json_schema.constants import common_values, scalar_keys
from grammars.json_schema.core import (
    _ANNOTATIONS,
    _ASSERTIONS,
    _TYPE_KEYWORDS,
    _constants,
    _has_rules,
    _types_of,
    _value_types,
    node_size,
)
from grammars.json_schema.negation import canonical_texts
from grammars.json_schema.strings import _pattern_dfa
from grammars.members import MAX_NEEDED_CLASSES, least_sets, needed_after

_ALL_TYPES = frozenset({"null", "boolean", "object", "array", "string", "number"})
# keywords that constrain values of every type (or whose effect is not read here)
_GENERAL = frozenset(
    {"const", "enum", "allOf", "anyOf", "oneOf", "not", "$ref", "__alternatives"}
    | {"if", "then", "else", "dependencies", "dependentRequired", "dependentSchemas"}
)
_OBJECT_ONLY = frozenset({"dependencies", "dependentRequired", "dependentSchemas"})
_MAX_PROOF_DEPTH = 16  # properties and combinators a disjointness proof looks into
_MAX_EXCLUSIVE = 8  # overlapping branches made exclusive by DFA differences
# string keywords whose automata read every spelling of a value (text_complete)
_COMPLETE_KEYWORDS = frozenset({"type", "pattern", "minLength", "maxLength"})


def admitted_types(schema) -> frozenset | None:
    """The JSON types ("integer" folded into "number") of the values a schema may admit; None
    when combinators make that unknown."""
    if schema is False:
        return frozenset()
    if schema is True:
        return _ALL_TYPES
    if not isinstance(schema, dict):
        return None
    known = _value_types(schema)
    if known is not None:
        return frozenset(known)
    types = _types_of(schema)
    if types is not None:  # "type" holds beside any combinator
        return frozenset("number" if t == "integer" else t for t in types)
    if any(k in schema for k in _GENERAL - _OBJECT_ONLY):
        return None
    return _ALL_TYPES


def _unconstrained(schema: dict, t: str) -> bool:
    """Every value of type `t` matches the schema (no keyword constrains that type)."""
    types = _types_of(schema)
    if types is not None and t not in types:  # "integer" alone is not every number
        return False
    own = set(_TYPE_KEYWORDS.get(t, ()))
    if t == "object":
        own |= _OBJECT_ONLY
    return not any(k in own or (k in _GENERAL and k not in _OBJECT_ONLY) for k in schema)


class OneOfProofs:
    """Disjointness of schemas, with `deref` resolving $refs and `strict` the compile's default
    for additionalProperties."""

    def __init__(self, deref: Callable, search: Callable, strict: bool):
        self.deref, self.search, self.strict = deref, search, strict

    def overlapping(self, branches: list) -> list[int]:
        """The branches that may share a value with another one (to be checked exactly);
        branches of scalar constants are told apart by their constants alone."""
        keys = [scalar_keys(b) for b in branches]
        owners: dict = {}  # constant -> how many branches name it
        for ks in keys:
            for k in ks or ():
                owners[k] = owners.get(k, 0) + 1
        general = [j for j, ks in enumerate(keys) if ks is None]
        out = []
        for i, ks in enumerate(keys):
            checkpoint()
            if ks is not None and any(owners[k] > 1 for k in ks):
                out.append(i)
                continue
            others = general if ks is not None else range(len(branches))
            a = branches[i]
            if any(j != i and not self.disjoint(a, branches[j]) for j in others):
                out.append(i)
        return out

    def disjoint(self, a, b, depth: int = 0) -> bool:
        """True when no value can match both schemas: by type, by const/enum, by patterns no
        string matches both, or, for objects only, by a required property whose schemas are
        disjoint (so, recursively) or that the other one forbids."""
        a, b = self.deref(a), self.deref(b)
        if a is False or b is False:
            return True
        if not isinstance(a, dict) or not isinstance(b, dict) or depth > _MAX_PROOF_DEPTH:
            return False
        ca, cb = _constants(a), _constants(b)
        if ca is not None and cb is not None and not common_values(ca, cb):
            return True
        ta, tb = self.types(a), self.types(b)
        if ta is None or tb is None:
            return False
        common = ta & tb
        if common == {"string"}:
            return _patterns_disjoint(a, b)
        return not common or (common == {"object"} and self._objects_disjoint(a, b, depth))

    def types(self, schema, depth: int = 0) -> frozenset | None:
        """admitted_types, also through $ref, anyOf / oneOf (the union of their branches'
        types) and allOf (the intersection); `not` and conditions only narrow, so they are
        left out (the types found may be more than the schema admits, never fewer)."""
        try:
            schema = self.deref(schema)
        except GrammarError:  # (reported where the schema is built)
            return None
        known = admitted_types(schema)
        if known is not None or not isinstance(schema, dict) or depth > _MAX_PROOF_DEPTH:
            return known
        out = _ALL_TYPES
        groups = [(k, schema[k]) for k in ("anyOf", "oneOf") if k in schema]
        groups += list(schema.get("__alternatives") or [])
        for _, branches in groups:
            if not isinstance(branches, list):
                return None
            union = frozenset()
            for branch in branches:
                found = self.types(branch, depth + 1)
                if found is None:
                    return None
                union |= found
            out &= union
        for sub in schema.get("allOf") or []:
            found = self.types(sub, depth + 1)
            if found is not None:
                out &= found
        return out

    def _objects_disjoint(self, a: dict, b: dict, depth: int = 0) -> bool:
        """Each side is read with its allOf members, every one of which judges the object."""
        parts_a, parts_b = self._parts(a), self._parts(b)
        required_a = {n for p in parts_a for n in p.get("required") or []}
        required_b = {n for p in parts_b for n in p.get("required") or []}
        if self._forbids_any(parts_a, required_b) or self._forbids_any(parts_b, required_a):
            return True
        strict_a, strict_b = self._strict(parts_a), self._strict(parts_b)
        for name in required_a & required_b:
            for pa in parts_a:
                for pb in parts_b:
                    va, vb = self._member(pa, name, strict_a), self._member(pb, name, strict_b)
                    if va is not None and vb is not None and self.disjoint(va, vb, depth + 1):
                        return True
        return False

    def _forbids_any(self, parts: list[dict], names: set) -> bool:
        strict = self._strict(parts)
        return any(self.forbids(p, n, strict) for p in parts for n in names)

    def _strict(self, parts: list[dict]) -> bool:
        """The compile's default for additionalProperties (false when strict) holds for a
        schema without allOf members only: merged, they name each other's properties."""
        return self.strict and len(parts) == 1

    def _parts(self, schema: dict) -> list[dict]:
        """`schema` and, through $ref, its allOf members (a few levels deep)."""
        out, todo = [], [(schema, 0)]
        while todo:
            part, level = todo.pop()
            try:
                part = self.deref(part)
            except GrammarError:  # (reported where the schema is built)
                continue
            if not isinstance(part, dict) or len(out) > 16:
                continue
            out.append(part)
            if level < 4 and isinstance(part.get("allOf"), list):
                todo.extend((sub, level + 1) for sub in part["allOf"])
        return out

    def _member(self, schema: dict, name: str, strict: bool):
        """The schema a property `name` of an object matching `schema` must match; None where
        patternProperties take part (`strict`: additionalProperties false where absent)."""
        props = schema.get("properties") or {}
        if name in props:
            return props[name]
        patterns = schema.get("patternProperties") or {}
        if any(self.search(p, name) for p in patterns):
            return None
        additional = schema.get("additionalProperties")
        return (not strict) if additional is None else additional

    def forbids(self, schema: dict, name: str, strict: bool | None = None) -> bool:
        """No object matching `schema` holds the property `name` (`strict`: additionalProperties
        is false where absent; the compile's default unless given)."""
        strict = self.strict if strict is None else strict
        props = schema.get("properties") or {}
        if name in props:
            return props[name] is False
        patterns = schema.get("patternProperties") or {}
        if any(self.search(p, name) for p in patterns):
            return False
        additional = schema.get("additionalProperties")
        return strict if additional is None else additional is False

    def separated_branches(self, branches: list) -> list | None:
        """The branches narrowed so that a value admitted by one matches no other original
        branch, or None where that cannot be done: a type both admit without constraining it
        is dropped from both (its values all match two branches: exact); of two object
        branches each requiring a property the other does not, each is made to refuse the
        other's (a restriction: an object holding both matches neither). Decisions are taken
        on the original branches, so each narrowing stays valid against the others."""
        bs = [self.deref(b) for b in branches]
        drop: list[set] = [set() for _ in bs]
        refuse: list[set] = [set() for _ in bs]
        for i in range(len(bs)):
            for j in range(i + 1, len(bs)):
                checkpoint()
                if self.disjoint(bs[i], bs[j]):
                    continue
                split = self._separation(bs[i], bs[j])
                if split is None:
                    return None
                types, key_i, key_j = split
                drop[i] |= types
                drop[j] |= types
                if key_i is not None:
                    refuse[i].add(key_i)
                    refuse[j].add(key_j)
        out = []
        for b, types, keys in zip(bs, drop, refuse):
            out.append(_narrowed(b, types, keys) if types or keys else None)
        return out

    def _separation(self, a, b):
        """(types to drop from both, property `a` must refuse, property `b` must refuse) that
        make a and b disjoint, or None."""
        if not isinstance(a, dict) or not isinstance(b, dict):
            return None
        ta, tb = admitted_types(a), admitted_types(b)
        if ta is None or tb is None:
            return None
        common = ta & tb
        shared = {t for t in common if t != "object"}
        if not all(_unconstrained(a, t) and _unconstrained(b, t) for t in shared):
            return None
        if "object" not in common or self._objects_disjoint(a, b):
            return shared, None, None
        req_a, req_b = list(a.get("required") or []), list(b.get("required") or [])
        only_b = [k for k in req_b if k not in req_a]
        only_a = [k for k in req_a if k not in req_b]
        if not only_a or not only_b:
            return None
        return shared, _least_used(a, only_b), _least_used(b, only_a)


def _least_used(schema: dict, names: list) -> str:
    """Of `names`, one the schema does not name among its properties, if any (refusing it
    costs the schema nothing it describes)."""
    props = schema.get("properties") or {}
    return next((n for n in names if n not in props), names[0])


def _narrowed(schema: dict, types: set, keys: set) -> dict:
    out = dict(schema)
    if types:
        kept = admitted_types(schema) - types
        explicit = _types_of(schema) or sorted(kept)
        out["type"] = [t for t in explicit if ("number" if t == "integer" else t) in kept]
    if keys:
        out["properties"] = {**(schema.get("properties") or {}), **dict.fromkeys(keys, False)}
    return out


def _patterns_disjoint(a: dict, b: dict) -> bool:
    """Two string schemas of type, pattern and lengths whose patterns no string matches both
    (their automata read every spelling of each character, so a common value would leave a
    common text)."""
    patterns = []
    for schema in (a, b):
        if set(schema) - _ANNOTATIONS - _COMPLETE_KEYWORDS or _types_of(schema) != ["string"]:
            return False
        if not isinstance(schema.get("pattern"), str):
            return False
        patterns.append(schema["pattern"])
    try:
        both = _pattern_dfa(patterns[0], True).product(_pattern_dfa(patterns[1], True), "and")
    except GrammarError:
        return False
    return both.is_empty()


def exclusive_dfas(nodes, path: str, complete: bool) -> list | None:
    """oneOf is enforced as anyOf, which is exact only when no value matches two branches:
    None when no text matches two of `nodes`. Otherwise each node's DFA minus the others' that
    it meets, which the exact nodes make sound: every text they accept has a value matching
    their branch, and they accept every canonical text (negation.canonical_texts: one spelling
    per value) of the values it matches, so a canonical text left in a branch's difference
    matches no other branch. Unless `complete` (the nodes accept every spelling:
    text_complete), each branch is first limited to canonical texts, a sound restriction.
    (Every string automaton refuses lone surrogate escapes, \\ud83d alone, alike, and reads an
    astral character both as itself and as its surrogate pair.)"""
    for n in nodes:
        if _has_rules(n) or node_size(n, 6000, True) > 6000:
            raise GrammarError(f"oneOf: branches that may overlap are not supported ({path})")
    dfas = [EagerDFA.from_node(n) for n in nodes]
    meets = [
        (i, j)
        for i in range(len(dfas))
        for j in range(i + 1, len(dfas))
        if not dfas[i].product(dfas[j], "and").is_empty()
    ]
    if not meets:
        return None
    if len(dfas) > _MAX_EXCLUSIVE:
        i, j = meets[0]
        raise GrammarError(f"oneOf: branches {i} and {j} overlap ({path})")
    canonical = None if complete else canonical_texts()[1]
    only = []
    for i, dfa in enumerate(dfas):
        if canonical is not None:
            dfa = dfa.product(canonical, "and")
        for j, other in enumerate(dfas):
            if (min(i, j), max(i, j)) in meets:
                dfa = dfa.product(other, "diff")
        only.append(dfa)
    return only


def text_complete(schema) -> bool:
    """The schema's node accepts every JSON text of every value it matches. Strings are
    written with or without escapes and counted by characters either way; integers (1.0,
    1e2), bounded numbers (exponents), constants (escaped letters), formats and object keys
    (escaped names) are not: only strings limited by type, pattern and lengths, booleans and
    null pass."""
    if not isinstance(schema, dict) or not set(schema) - _ANNOTATIONS <= _COMPLETE_KEYWORDS:
        return False
    types = _types_of(schema)
    return types is not None and set(types) <= {"string", "boolean", "null"}


_MAX_PRESENCE_KEYS = 6  # keys whose presence a oneOf over `required` lists may decide
_MAX_PRESENCE_VARIANTS = 16  # objects it may split into


def presence_variants(base: dict, branches: list) -> list[dict] | None:
    """A oneOf whose branches only name keys that must be present (`required`) or absent
    (`not: {required: [...]}`), beside an object schema `base`: the objects it admits, split by
    which of those keys are present, one schema per presence pattern that exactly one branch
    accepts (its keys required, the others forbidden). The patterns differ, so no value matches
    two of them: an exact anyOf. None when the oneOf is not of that form or splits too far."""
    if _types_of(base) != ["object"] or not isinstance(base.get("required", []), list):
        return None
    conditions = []  # (keys present, key sets not all present) per branch
    for branch in branches:
        if not isinstance(branch, dict) or set(branch) - _ANNOTATIONS - {"required", "not"}:
            return None
        present = branch.get("required", [])
        absent = branch.get("not", {"required": None})  # None: no `not`
        if (
            not isinstance(present, list)
            or not isinstance(absent, dict)
            or set(absent) - _ANNOTATIONS != {"required"}
            or not isinstance(absent["required"], list | None)
        ):
            return None
        together = None if absent["required"] is None else frozenset(absent["required"])
        conditions.append((frozenset(present), together))
    keys = sorted(set().union(*(p | (a or set()) for p, a in conditions)))
    if not keys or len(keys) > _MAX_PRESENCE_KEYS or not all(isinstance(k, str) for k in keys):
        return None
    needed = set(base.get("required", []))
    props = base.get("properties", {})
    if not isinstance(props, dict):
        return None
    variants = []
    for bits in range(1 << len(keys)):
        present = {k for i, k in enumerate(keys) if bits >> i & 1}
        if needed & (set(keys) - present):
            continue  # base requires a key this pattern leaves out
        # a branch holds when its keys are present and, with a `not`, not all of those
        # (`not: {required: []}` holds for no object)
        matched = sum(p <= present and (a is None or not a <= present) for p, a in conditions)
        if matched != 1:
            continue
        variant = {k: v for k, v in base.items() if k not in ("required", "properties")}
        variant["required"] = list(dict.fromkeys([*base.get("required", []), *sorted(present)]))
        variant["properties"] = {**props, **{k: False for k in keys if k not in present}}
        variants.append(variant)
    return variants if len(variants) <= _MAX_PRESENCE_VARIANTS else None


_NEEDS_BESIDE = frozenset(
    {"type", "properties", "required", "additionalProperties", "minProperties", "maxProperties"}
)
_MAX_NEEDED_SETS = 16


def needed_sets(base: dict, branches: list) -> list[list[str]] | None:
    """An anyOf whose branches only list `required` keys, beside an object schema that names
    them all in `properties` and holds no other assertion: the branches' key lists (an object
    is valid when one of them is all present); else None, also where the object would take
    more than MAX_NEEDED_CLASSES states of what is still needed at some property (each holds
    a copy of the members after it: members._fixed_order_needing)."""
    if (
        _types_of(base) != ["object"]
        or not isinstance(base.get("properties"), dict)
        or not isinstance(base.get("required", []), list)
        or any(k in _ASSERTIONS and k not in _NEEDS_BESIDE for k in base)
        or len(branches) > _MAX_NEEDED_SETS
    ):
        return None
    props = base["properties"]
    needs = []
    for branch in branches:
        if not isinstance(branch, dict) or set(branch) - _ANNOTATIONS != {"required"}:
            return None
        keys = branch["required"]
        if not isinstance(keys, list) or not all(isinstance(k, str) and k in props for k in keys):
            return None
        needs.append(keys)
    classes = {least_sets(frozenset(frozenset(keys) for keys in needs))}
    for name in props:  # every property taken or passed over, as members._fixed_order_needing
        classes = {needed_after(left, name, taken) for left in classes for taken in (True, False)}
        classes.discard(frozenset())
        if len(classes) > MAX_NEEDED_CLASSES:
            return None
    return needs
