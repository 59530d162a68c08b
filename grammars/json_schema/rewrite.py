"""Schema-to-schema rewrites: an allOf merged into one schema, dependencies split into
alternatives."""

from __future__ import annotations

from grammars.errors import GrammarError
from grammars.json_schema.constants import common_values
from grammars.json_schema.core import _ANNOTATIONS, _DEPENDENCY_KEYWORDS

_MAX_DEPENDENCIES = 4  # each one doubles the object's alternatives


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
    out = dict(a)
    for k, v in b.items():
        if k in _ANNOTATIONS or k.startswith("x-") or k not in out:  # x-*: OpenAPI's notes
            out[k] = v
            continue
        w = out[k]
        if w == v:
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
            out[k] = max(w, v)
        elif k in ("maximum", "maxLength", "maxItems", "maxProperties", "exclusiveMaximum"):
            if isinstance(v, bool) or isinstance(w, bool):
                raise GrammarError(f"allOf: cannot combine {k} ({path})")
            out[k] = min(w, v)
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
        elif k in ("anyOf", "oneOf"):
            groups = list(out.pop("__alternatives", []))
            out["__alternatives"] = groups + [(k, w), (k, v)]
            del out[k]
        else:
            raise GrammarError(f"allOf: cannot combine two different {k!r} ({path})")
    _restrict_to_additional(out, a, b, path)
    _restrict_to_additional(out, b, a, path)
    return out


def _restrict_to_additional(out: dict, a: dict, b: dict, path: str) -> None:
    """A property that `b` names but `a` does not must still satisfy a's additionalProperties
    (each schema of an allOf judges the whole object)."""
    extra = a.get("additionalProperties", True)
    if extra is True or not isinstance(b.get("properties"), dict):
        return
    if a.get("patternProperties"):
        raise GrammarError(
            f"allOf: cannot combine patternProperties with other properties ({path})"
        )
    own = a.get("properties") or {}
    props = dict(out.get("properties") or {})
    for name in b["properties"]:
        if name not in own:
            props[name] = False if extra is False else _merge(props[name], extra, path)
    out["properties"] = props
