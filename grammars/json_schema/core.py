"""Shared by the json_schema modules: keyword tables, grammar-node measures and queries on a
schema's types and constants."""

from __future__ import annotations

from grammars.errors import GrammarError

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
    "if",
    "then",
    "else",
    "contains",
    "minContains",
    "maxContains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
}
_DEPENDENCY_KEYWORDS = ("dependencies", "dependentRequired", "dependentSchemas")
_TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")


def node_size(node) -> int:
    kind = node[0]
    if kind in ("cat", "alt"):
        return 1 + sum(node_size(c) for c in node[1])
    if kind == "rep":
        return 1 + node_size(node[1]) * max(1, node[3] or node[2] or 1)
    if kind == "members":
        return 1 + sum(node_size(i) for i, _ in node[1]) + (node_size(node[3]) if node[3] else 0)
    if kind == "dfa":
        return len(node[1].trans)
    return 1


def _has_rules(node) -> bool:
    kind = node[0]
    if kind == "nt":
        return True
    if kind in ("cat", "alt"):
        return any(_has_rules(c) for c in node[1])
    if kind == "rep":
        return _has_rules(node[1])
    if kind == "members":
        return any(_has_rules(i) for i, _ in node[1]) or (
            node[3] is not None and _has_rules(node[3])
        )
    return False


def _types_of(schema: dict):
    t = schema.get("type")
    if t is None:
        return None
    types = [t] if isinstance(t, str) else list(t)
    for x in types:
        if x not in _TYPES:
            raise GrammarError(f"type: unknown type {x!r}")
    if "integer" in types and "number" in types:
        types.remove("integer")
    return types


_TYPE_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"),
    "object": (
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
    ),
}


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
