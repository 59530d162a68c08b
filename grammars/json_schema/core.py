"""Shared by the json_schema modules: keyword tables, grammar-node measures and queries on a
schema's types and constants."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from urllib.parse import unquote

import numpy as np

from grammars.budget import checkpoint
from grammars.errors import GrammarCancelled, GrammarError, GrammarTimeout, encodable
from grammars.members import MAX_NEEDED_CLASSES, member_copies

# keywords that only annotate
_ANNOTATIONS = {
    "$schema",
    "$id",
    "id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "example",
    "readOnly",
    "writeOnly",
    "deprecated",
    "definitions",
    "$defs",
    "contentMediaType",
    "contentEncoding",
    "$anchor",
    "markdownDescription",
    "deprecationMessage",
    "errorMessage",
    "discriminator",
    "xml",
    "externalDocs",
    "nullable",
    "enumDescriptions",
    "markdownEnumDescriptions",
    "$vocabulary",
    "tsType",
    "defaultSnippets",
    "doNotSuggest",
    "patternErrorMessage",
}
# assertions the engine cannot enforce (other unknown keywords are annotations, as the
# standard says, and are ignored)
_UNSUPPORTED = {
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
}
_DEPENDENCY_KEYWORDS = ("dependencies", "dependentRequired", "dependentSchemas")
_TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.?)*"?', re.DOTALL)  # never fails: linear


def node_size(node, cap: int | None = None, exact: bool = False) -> int:
    """The size of a node: its nodes, a repetition's body counted once per copy, a DFA's
    states; counting stops once the total passes `cap`. A pattern left to the lazy DFA counts
    as its expression's size, or with `exact` as its DFA's (determined here): the measure of
    the limits on automata built eagerly (intersections, overlap checks)."""
    total = 0
    todo = [(node, 1)]
    while todo:
        n, copies = todo.pop()
        total += copies
        if cap is not None and total > cap:
            return total
        kind = n[0]
        if kind in ("cat", "alt"):
            todo.extend((c, copies) for c in n[1])
        elif kind == "rep":
            todo.append((n[1], copies * max(1, n[3] or n[2] or 1)))
        elif kind == "members":  # the members are built once per count (or set) they lead to
            lo, hi = n[4]
            tracks = copies * max(lo if hi is None else hi, 1)
            if n[5]:
                tracks = copies * member_copies(n)
            elif n[6] is not None:  # and per what is still needed
                tracks *= min(len(n[6]) + 1, MAX_NEEDED_CLASSES)
            todo.extend((i, tracks) for i, _ in n[1])
            todo.append((n[2], tracks * len(n[1])))  # a separator before each member
            if n[3]:
                todo.append((n[3], tracks))
        elif kind == "dfa":
            dfa = n[1].determinised() if exact and hasattr(n[1], "determinised") else n[1]
            total += copies * (dfa.n_states - 1)
        elif kind == "frag":
            todo.append((n[1], copies))
    return total


_MIN_SHARED = 8  # nodes smaller than this are cheaper to build again than to copy


def shared(node) -> tuple:
    """`node` as a fragment (built once per automaton, copied at its other uses) when it is
    large enough for that to pay."""
    if node[0] in ("frag", "dfa", "nt", "b") or node_size(node, _MIN_SHARED) < _MIN_SHARED:
        return node
    return ("frag", node)


def positive_number(x, message: str) -> Fraction:
    """x, a positive finite JSON number, as the decimal it is written as (a float read as its
    shortest repr: 0.1 is 1/10); GrammarError(message) for anything else (NaN, infinities,
    booleans, zero, negatives, other types)."""
    if (
        isinstance(x, bool)
        or not isinstance(x, (int, float))
        or not x > 0
        or (isinstance(x, float) and not math.isfinite(x))
    ):
        raise GrammarError(message)
    return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)


def _has_rules(node) -> bool:
    todo = [node]
    while todo:
        n = todo.pop()
        kind = n[0]
        if kind == "nt":
            return True
        if kind in ("cat", "alt"):
            todo.extend(n[1])
        elif kind in ("rep", "frag"):
            todo.append(n[1])
        elif kind == "members":
            todo.extend(i for i, _ in n[1])
            if n[3] is not None:
                todo.append(n[3])
    return False


# objects and arrays a decoded schema may hold (as JSON text: 2 MB at the least)
MAX_CONTAINERS = 1 << 20


def check_depth(schema, limit: int, max_bytes: int | None = None) -> bool:
    """GrammarError when objects and arrays nest deeper than `limit` in a decoded schema, or
    when there are too many of them or of the values they hold for `max_bytes` of JSON text
    (objects shared between places would otherwise make json.dumps write them over and over);
    a walk without recursion, one level of nesting at a time, so it is safe before json.dumps
    or the builder recurse. Returns whether the schema is plain JSON: every value a str, int,
    finite float, bool or None (not a subclass) or a dict or list (compiler.schema_text then
    writes it with orjson, which writes other objects, such as enum members, as values, and
    NaN and the infinities as null)."""
    kinds = (dict, list)
    plain = type(schema) in _PLAIN or isinstance(schema, kinds) or _finite(schema)
    level = [schema] if isinstance(schema, kinds) else []
    depth = seen = values = 0
    while level:
        depth += 1
        if depth > limit:
            raise GrammarError(f"schema nested more than {limit} levels deep")
        seen += len(level)
        width = sum(map(len, level))  # the values this level's containers hold
        values += width
        if seen > _COUNTED_AT or values > _COUNTED_AT:
            _check_count(seen, values, max_bytes)
        below: list = []
        add = below.append
        wide = width > _COUNTED_AT  # checked as it is read (shared subobjects, long lists)
        read = 0
        for value in level:
            for v in value.values() if isinstance(value, dict) else value:
                if type(v) in _PLAIN:
                    continue
                if isinstance(v, kinds):
                    add(v)
                elif not _finite(v):
                    plain = False
            if wide:
                read += len(value)
                if read > _COUNTED_AT:
                    _check_count(seen + len(below), values, max_bytes)
                    read = 0
        level = below
    return plain


_PLAIN = frozenset((str, int, bool, type(None)))  # JSON's values but numbers with a fraction


def _finite(v) -> bool:
    """v is a float (not a subclass) that is neither NaN nor infinite."""
    return type(v) is float and not v - v


_COUNTED_AT = 4095  # containers or values read between two checks of the counts
MAX_VALUES = 1 << 24  # values in objects and arrays (a value shared between places: at each)


def _check_count(containers: int, values: int, max_bytes: int | None) -> None:
    checkpoint()
    if max_bytes is not None and max(2 * containers, values) > max_bytes:
        # "{}" at the least for each container, a byte for each value it holds
        raise GrammarError(f"the schema is longer than the limit of {max_bytes} bytes")
    if containers > MAX_CONTAINERS:  # without a byte limit: no endless walk either
        raise GrammarError(
            f"the schema holds more than {MAX_CONTAINERS} objects and arrays (a "
            "subobject shared between places counts at each)"
        )
    if values > MAX_VALUES:
        raise GrammarError(
            f"the schema holds more than {MAX_VALUES} values in objects and arrays (a value "
            "shared between places counts at each)"
        )


def check_text_depth(text: str, limit: int) -> None:
    """check_depth on JSON text, before json.loads recurses into it."""
    if text.count("[") + text.count("{") <= limit:
        return
    data = np.frombuffer(_JSON_STRING.sub("", text).encode("utf-8", "surrogatepass"), np.uint8)
    steps = np.isin(data, (ord("["), ord("{"))).astype(np.int64)
    steps -= np.isin(data, (ord("]"), ord("}")))
    if np.cumsum(steps).max(initial=0) > limit:
        raise GrammarError(f"schema nested more than {limit} levels deep")


def resolve_ref(root, ref: str):
    """(the schema a local $ref points to in `root`, its "#/..." key)."""
    if not isinstance(ref, str):
        raise GrammarError("$ref must be a string")
    if not ref.startswith("#"):
        raise GrammarError(f"$ref: only local references (#...) are supported, got {ref!r}")
    target = root
    pointer = unquote(ref[1:])
    if pointer and not pointer.startswith("/"):
        raise GrammarError(f"$ref: anchors are not supported ({ref!r})")
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        try:
            target = target[int(part)] if isinstance(target, list) else target[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise GrammarError(f"$ref: cannot resolve {ref!r}") from None
    return target, "#" + pointer


def array_parts(schema: dict, path: str) -> tuple[list, object]:
    """(the schemas of an array's first items, the schema of the items after them or None
    where the schema gives none): prefixItems and items, or the draft 4-2019 tuple form."""
    prefix, rest = schema.get("prefixItems"), schema.get("items")
    if isinstance(rest, list):
        if prefix is not None:
            raise GrammarError(f"items must be a schema beside prefixItems ({path})")
        prefix, rest = rest, schema.get("additionalItems")
    if not isinstance(prefix, list | None):
        raise GrammarError(f"prefixItems must be a list ({path})")
    return list(prefix or []), rest


def _types_of(schema: dict):
    t = schema.get("type")
    if t is None:
        return None
    if not isinstance(t, (str, list)):
        raise GrammarError(f"type must be a string or a list of strings, not {t!r}")
    types = [t] if isinstance(t, str) else list(t)
    for x in types:
        if x not in _TYPES:
            raise GrammarError(f"type: unknown type {x!r}")
    if "integer" in types and "number" in types:
        types.remove("integer")
    return types


_TYPE_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern", "format", "__patterns"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": (
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "contains",
        "minContains",
    ),
    "object": (
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
        "propertyNames",
    ),
}


# every keyword the builder reads; any other one is an annotation
_ASSERTIONS = frozenset(
    {k for ks in _TYPE_KEYWORDS.values() for k in ks}
    | {"type", "const", "enum", "anyOf", "oneOf", "allOf", "not", "$ref", "if", "then", "else"}
    | set(_DEPENDENCY_KEYWORDS)
    | _UNSUPPORTED
    | {"additionalItems", "__alternatives"}
)


def _implied_types(schema: dict):
    """Without "type", type-specific keywords constrain only values of their type; values of
    other types stay allowed."""
    if not any(k in schema for ks in _TYPE_KEYWORDS.values() for k in ks):
        return None
    return ["null", "boolean", "object", "array", "string", "number"]


def _value_types(schema: dict) -> set | None:
    """JSON types a schema admits, "integer" folded into "number"; None when unknown."""
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            return None
        return {"number" if _json_type(v) == "integer" else _json_type(v) for v in values}
    types = _types_of(schema)
    if types is None or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref", "not")):
        return None
    return {"number" if t == "integer" else t for t in types}


def _constants(schema: dict) -> list | None:
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return schema["enum"]
    return None


def _constrains(schema: dict) -> bool:
    return any(k not in _ANNOTATIONS for k in schema)


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})  # values, not schemas


def check_ref_scopes(schema, id_key: str = "$id", scoped: bool = False) -> None:
    """Raise GrammarError where a local $ref sits inside a subschema with an $id (`id_key`: id
    in drafts 3 and 4) of its own: the reference is read against that subschema, and resolving
    it from the root document would read another schema."""
    if isinstance(schema, list):
        for item in schema:
            check_ref_scopes(item, id_key, scoped)
        return
    if not isinstance(schema, dict):
        return
    if scoped and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#"):
        raise GrammarError(
            f"$ref: {schema['$ref']!r} inside a subschema with an $id of its own is not supported"
        )
    for key, sub in schema.items():
        if key in _DATA_KEYWORDS:
            continue
        if isinstance(sub, dict):
            base = sub.get(id_key)
            inner = scoped or (isinstance(base, str) and not base.startswith("#") and base != "")
            check_ref_scopes(sub, id_key, inner)
        elif isinstance(sub, list):
            check_ref_scopes(sub, id_key, scoped)


def locate(exc: GrammarError, path: str) -> GrammarError:
    """`exc`, its message naming the subschema at `path` where it arose unless it names a
    place already (a timeout and a cancel are left as they are)."""
    if isinstance(exc, (GrammarTimeout, GrammarCancelled)) or len(exc.args) != 1:
        return exc
    message = str(exc.args[0])
    if "(#" not in message and " at #" not in message:
        exc.args = (encodable(f"{message} ({path[:200]})"),)
    return exc
