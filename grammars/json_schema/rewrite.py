"""Schema-to-schema rewrites: an allOf merged into one schema, dependencies split into
alternatives."""

from __future__ import annotations

import json
import math
from fractions import Fraction

from grammars.errors import GrammarError
from grammars.json_schema.constants import common_values
from grammars.json_schema.core import (
    _ASSERTIONS,
    _DEPENDENCY_KEYWORDS,
    array_parts,
    positive_number,
)
from grammars.json_schema.instances import pattern_search

_MAX_DEPENDENCIES = 6  # each one doubles the object's alternatives


def _split_dependencies(schema: dict, path: str):
    """dependencies / dependentRequired / dependentSchemas as alternatives without them: for
    each named property, one branch where it is absent and one where it is present together
    with what it depends on (required names, or a schema merged in)."""
    pairs = []
    for key in _DEPENDENCY_KEYWORDS:
        deps = schema.get(key) or {}
        if not isinstance(deps, dict):
            raise GrammarError(f"{key} must be an object at {path}")
        pairs.extend((key, name, dep) for name, dep in deps.items())
    if len(pairs) > _MAX_DEPENDENCIES:
        raise GrammarError(
            f"{pairs[0][0]}: more than {_MAX_DEPENDENCIES} dependencies are not supported ({path})"
        )
    branches = [{k: v for k, v in schema.items() if k not in _DEPENDENCY_KEYWORDS}]
    for key, name, dep in pairs:
        if isinstance(dep, list):
            if not all(isinstance(n, str) for n in dep):
                raise GrammarError(f"{key}: {name!r} must list property names ({path})")
            dep = {"required": dep}
        elif not isinstance(dep, (bool, dict)):
            raise GrammarError(f"{key}: {name!r} must be a list or a schema ({path})")
        split = []
        for branch in branches:
            required = list(branch.get("required") or [])
            if name not in required:
                absent = {**(branch.get("properties") or {}), name: False}
                split.append({**branch, "properties": absent})
            if dep is not False:
                present = {
                    **branch,
                    "required": [*required, name] if name not in required else required,
                }
                split.append(present if dep is True else {"allOf": [present, dep]})
        branches = split
    if not branches:
        return False
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _merge(a, b, path: str):
    """allOf of two schemas as one schema, for the keywords where that is exact."""
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    if isinstance(a.get("if"), (bool, dict)) and "if" in b:  # two conditions: both apply
        kept = ("if", "then", "else")
        aside = {k: v for k, v in b.items() if k in kept}
        b = {k: v for k, v in b.items() if k not in kept}
        b["allOf"] = [*b.get("allOf", []), aside]
    a, b = _merged_arrays(a, b, path)
    out = dict(a)
    for k, v in b.items():
        if k not in out:
            out[k] = v
            continue
        w = out[k]
        if k == "const":  # True == 1 in Python, not in JSON: compare the texts
            if json.dumps(w, sort_keys=True) != json.dumps(v, sort_keys=True):
                return False  # two different constants: no value is both
            continue
        if w == v or k not in _ASSERTIONS:  # two annotations: either will do
            continue
        if k == "type":
            ta = [w] if isinstance(w, str) else list(w)
            tb = [v] if isinstance(v, str) else list(v)
            both = [t for t in ta if t in tb or (t == "integer" and "number" in tb)]
            both += [t for t in tb if t == "integer" and "number" in ta and t not in both]
            out[k] = both
        elif k == "required":
            out[k] = list(dict.fromkeys(list(w) + list(v)))
        elif k == "properties":
            merged = dict(w)
            for name, sub in v.items():
                merged[name] = _merge(merged[name], sub, path) if name in merged else sub
            out[k] = merged
        elif k in ("minimum", "minLength", "minItems", "minProperties", "exclusiveMinimum"):
            if isinstance(v, bool) or isinstance(w, bool):
                raise GrammarError(f"allOf: cannot combine {k} ({path})")
            out[k] = max(w, v, key=_exact)
        elif k in ("maximum", "maxLength", "maxItems", "maxProperties", "exclusiveMaximum"):
            if isinstance(v, bool) or isinstance(w, bool):
                raise GrammarError(f"allOf: cannot combine {k} ({path})")
            out[k] = min(w, v, key=_exact)
        elif k == "enum":
            out[k] = common_values(w, v)
        elif k in ("additionalProperties", "items"):
            if isinstance(w, dict) and isinstance(v, dict):
                out[k] = _merge(w, v, path)
            elif w is False or v is False:
                out[k] = False
            elif w is True:
                out[k] = v
            elif v is True:
                out[k] = w
            else:
                raise GrammarError(f"allOf: cannot combine {k} ({path})")
        elif k == "not":  # neither w nor v
            out[k] = {"enum": _values(w) + _values(v)} if _listed(w, v) else {"anyOf": [w, v]}
        elif k == "$ref":  # both targets apply (as allOf, below)
            out["allOf"] = [*out.get("allOf", []), {"$ref": v}]
        elif k == "allOf":
            out[k] = [*w, *v]
        elif k == "pattern":  # both must match: the second one kept aside for string_node
            out["__patterns"] = [*out.get("__patterns", []), v]
        elif k == "__patterns":
            out[k] = [*w, *v]
        elif k == "patternProperties" and isinstance(w, dict) and isinstance(v, dict):
            out[k] = _merged_patterns(a, b, path)
        elif k == "propertyNames":  # every key matches both
            out[k] = _merge(w, v, path)
        elif k == "multipleOf":
            out[k] = _common_multiple(w, v, path)
        elif k in ("anyOf", "oneOf"):
            groups = list(out.pop("__alternatives", []))
            out["__alternatives"] = groups + [(k, w), (k, v)]
            del out[k]
        else:
            raise GrammarError(f"allOf: cannot combine two different {k!r} ({path})")
    _restrict_to_additional(out, a, b, path)
    _restrict_to_additional(out, b, a, path)
    if "$ref" in out and any(k in _ASSERTIONS for k in out if k != "$ref"):
        # a $ref beside other keywords is ignored by drafts before 2019-09: through allOf the
        # merged keywords apply in every draft
        out["allOf"] = [{"$ref": out.pop("$ref")}, *out.get("allOf", [])]
    return out


def _exact(bound):
    """A bound as the decimal it is written as, for comparing (the float 1e50 is 10**50, not
    10**50 + 7.6e33); any other value, and a float that is not finite (refused later, by the
    node of its keyword), as it is."""
    return Fraction(repr(bound)) if isinstance(bound, float) and math.isfinite(bound) else bound


_ITEM_KEYWORDS = ("prefixItems", "items", "additionalItems")
_CONTAINS_KEYWORDS = ("contains", "minContains", "maxContains")


def _merged_arrays(a: dict, b: dict, path: str) -> tuple[dict, dict]:
    """a and b with the keywords whose meaning depends on a sibling merged here: items read
    after their own schema's prefix (a prefix position takes the other side's prefix item or
    its items, the rest both sides' items), minContains / maxContains that count their own
    schema's contains (without one they assert nothing; two different contains are an
    error)."""
    a = {k: v for k, v in a.items() if k not in _CONTAINS_KEYWORDS[1:] or "contains" in a}
    b = {k: v for k, v in b.items() if k not in _CONTAINS_KEYWORDS[1:] or "contains" in b}
    if "contains" in a and "contains" in b:
        ga, gb = ({k: s[k] for k in _CONTAINS_KEYWORDS if k in s} for s in (a, b))
        if json.dumps(ga, sort_keys=True) != json.dumps(gb, sort_keys=True):
            raise GrammarError(f"allOf: cannot combine contains of two subschemas ({path})")
    if not (any(k in a for k in _ITEM_KEYWORDS) and any(k in b for k in _ITEM_KEYWORDS)):
        return a, b
    (pa, ra), (pb, rb) = array_parts(a, path), array_parts(b, path)
    ra, rb = (True if r is None else r for r in (ra, rb))
    if not pa and not pb:
        return a, b  # items against items: merged as any two schemas
    n = max(len(pa), len(pb))
    prefix = [
        _merge(pa[i] if i < len(pa) else ra, pb[i] if i < len(pb) else rb, path) for i in range(n)
    ]
    a = {k: v for k, v in a.items() if k not in _ITEM_KEYWORDS}
    b = {k: v for k, v in b.items() if k not in _ITEM_KEYWORDS}
    a["prefixItems"], a["items"] = prefix, _merge(ra, rb, path)
    return a, b


def _common_multiple(a, b, path: str):
    """The least common multiple of two positive numbers (decimals read as written)."""
    message = f"multipleOf must be a positive number ({path})"
    fa, fb = positive_number(a, message), positive_number(b, message)
    # lcm of p/q and r/s is lcm(p, r) / gcd(q, s) for fractions in lowest terms
    p, r = fa.numerator, fb.numerator
    common = Fraction(p * r // math.gcd(p, r), math.gcd(fa.denominator, fb.denominator))
    return int(common) if common.denominator == 1 else float(common)


def _merged_patterns(a: dict, b: dict, path: str) -> dict:
    """Both schemas' patternProperties: a key matching a pattern of either must match its
    schema (one pattern in both: both schemas). What each side's additionalProperties says of
    keys under the other's patterns only is added by _restrict_to_additional."""
    merged = dict(a["patternProperties"])
    for pattern, sub in b["patternProperties"].items():
        merged[pattern] = _merge(merged[pattern], sub, path) if pattern in merged else sub
    return merged


def _listed(*schemas) -> bool:
    """Each schema is a const or enum and nothing else."""
    return all(isinstance(s, dict) and set(s) in ({"const"}, {"enum"}) for s in schemas)


def _values(schema: dict) -> list:
    return [schema["const"]] if "const" in schema else list(schema["enum"])


def _restrict_to_additional(out: dict, a: dict, b: dict, path: str) -> None:
    """A key that `b` names or lets in by a pattern, but that `a` does not name and none of
    a's patterns takes, must still satisfy a's additionalProperties (each schema of an allOf
    judges the whole object). Where that cannot be said exactly in one schema: an error."""
    extra = a.get("additionalProperties", True)
    if extra is True:
        return
    own_patterns = a.get("patternProperties") or {}
    names = b.get("properties") if isinstance(b.get("properties"), dict) else {}
    new_names = [n for n in names if n not in (a.get("properties") or {})]
    new_patterns = [p for p in b.get("patternProperties") or {} if p not in own_patterns]
    if not new_names and not new_patterns:
        return  # b lets in no key that a does not judge itself
    if extra is False and (own_patterns or new_patterns):
        # every key must be one of a's properties or match one of a's patterns
        own_keys = [{"pattern": p} for p in own_patterns]
        if a.get("properties"):
            own_keys.append({"enum": list(a["properties"])})
        allowed = {"anyOf": own_keys} if own_keys else False
        out["propertyNames"] = _merge(out.get("propertyNames", True), allowed, path)
        return
    if own_patterns and new_patterns:
        raise GrammarError(
            f"allOf: cannot combine patternProperties with other properties ({path})"
        )
    props = dict(out.get("properties") or {})
    if new_patterns:  # keys under them (none of them named) must match `extra` too
        patterns = dict(out["patternProperties"])
        for p in new_patterns:
            if any(pattern_search(p, name) is not False for name in props):
                raise GrammarError(
                    f"allOf: cannot combine patternProperties with other properties ({path})"
                )
            patterns[p] = _merge(patterns[p], extra, path)
        out["patternProperties"] = patterns
    for name in new_names:
        taken = [pattern_search(p, name) for p in own_patterns]
        if None in taken:
            raise GrammarError(f"allOf: cannot combine patternProperties with properties ({path})")
        if not any(taken):  # (under one of a's patterns, the builder merges its schema in)
            props[name] = False if extra is False else _merge(props[name], extra, path)
    out["properties"] = props


# assertion keywords by the draft that introduced them (older drafts ignore them)
_NEWER_KEYWORDS = {
    6: frozenset({"const", "contains", "propertyNames"}),
    7: frozenset({"if", "then", "else"}),
    2019: frozenset(
        {"dependentRequired", "dependentSchemas", "minContains", "maxContains"}
        | {"unevaluatedProperties", "unevaluatedItems"}
    ),
    2020: frozenset({"prefixItems"}),
}
_SCHEMA_VALUED = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not")
_SCHEMA_VALUED += ("if", "then", "else", "unevaluatedProperties", "unevaluatedItems", "items")
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def draft_level(schema) -> int:
    """The draft a root schema declares in `$schema` (4, 6, 7, 2019, or 2020: also when it
    declares none or one not known here)."""
    declared = str(schema.get("$schema", "")) if isinstance(schema, dict) else ""
    for name, level in (("draft-03", 4), ("draft-04", 4), ("draft-06", 6), ("draft-07", 7)):
        if name in declared:
            return level
    return 2019 if "2019-09" in declared else 2020


def in_draft(schema, level: int, text: str | None = None):
    """`schema` without the assertion keywords its draft does not define (draft 4 reads no
    `const`, draft 7 no `minContains`, ...), at every place that holds a subschema; the same
    object where there is nothing to drop. `text`, the schema's compact JSON when the caller
    has it, spares the walk when no such keyword is written there as a key."""
    unknown = frozenset().union(*(k for lv, k in _NEWER_KEYWORDS.items() if lv > level))
    if not unknown or (text is not None and not any(f'"{k}":' in text for k in unknown)):
        return schema
    return _without(schema, unknown, 0)


def _without(schema, unknown: frozenset, depth: int):
    if not isinstance(schema, dict):
        return schema
    if depth > 512:
        raise GrammarError("schema nested too deeply")
    out = None  # a copy, made at the first change
    for k, v in schema.items():
        if k in unknown:
            new = _DROPPED
        elif isinstance(v, dict) and k in _SCHEMA_VALUED:
            new = _without(v, unknown, depth + 1)
        elif isinstance(v, dict) and (k in _SCHEMA_MAPS or k == "dependencies"):
            new = {n: _without(sub, unknown, depth + 1) for n, sub in v.items()}
            if all(a is b for a, b in zip(new.values(), v.values())):
                new = v
        elif isinstance(v, list) and k in _SCHEMA_LISTS:
            new = [_without(sub, unknown, depth + 1) for sub in v]
            if all(a is b for a, b in zip(new, v)):
                new = v
        else:
            continue
        if new is not v:
            if out is None:
                out = dict(schema)
            if new is _DROPPED:
                del out[k]
            else:
                out[k] = new
    return schema if out is None else out


_DROPPED = object()  # _without's mark of a keyword to leave out
