"""JSON Schema to grammar rules.

Everything that is not recursive is inlined into one rule (so most schemas become a single
automaton); recursive `$ref`s, large definitions used more than once and nested values of
unconstrained JSON become rules of their own. Keywords that cannot be enforced raise
GrammarError naming the keyword, so a schema is never silently weakened.
"""

from __future__ import annotations

import functools
import json
import math
from urllib.parse import unquote

from grammars.automaton import (
    EMPTY,
    NOTHING,
    alt,
    byte_set,
    cat,
    difference,
    intersect,
    lit,
    opt,
    rep,
)
from grammars.errors import GrammarError
from grammars.regex import ANY_CHAR, json_chars, regex_to_node

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
_MAX_DEPENDENCIES = 4  # each one doubles the object's alternatives
_TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
_DIGIT = byte_set((0x30, 0x39))
_DIGIT19 = byte_set((0x31, 0x39))
_WS = ("b", byte_set(0x20, 0x09, 0x0A, 0x0D))
_STRING_CHAR = json_chars(ANY_CHAR)
_MAX_INLINE_USES = 300  # nodes in a definition above which a second use becomes a rule
_FORMATS = {
    "date": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "date-time": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "email": r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"{}|\\^`]*",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    "uri-reference": r"[^\s<>\"{}|\\^`]*",
    "json-pointer": r"(/([^~/]|~[01])*)*",
    "hostname": r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
}
# standard formats a validator may check that are not enforced here: they raise GrammarError
_UNENFORCED_FORMATS = {
    "regex",
    "uri-template",
    "idn-email",
    "idn-hostname",
    "iri",
    "iri-reference",
    "relative-json-pointer",
    "duration",
}
_H = "[0-9a-fA-F]{1,4}"
_V4 = _FORMATS["ipv4"]
_FORMATS["ipv6"] = "|".join(
    [
        f"({_H}:){{7}}{_H}",
        f"({_H}:){{1,7}}:",
        f"({_H}:){{1,6}}:{_H}",
        f"({_H}:){{1,5}}(:{_H}){{1,2}}",
        f"({_H}:){{1,4}}(:{_H}){{1,3}}",
        f"({_H}:){{1,3}}(:{_H}){{1,4}}",
        f"({_H}:){{1,2}}(:{_H}){{1,5}}",
        f"{_H}:(:{_H}){{1,6}}",
        f":((:{_H}){{1,7}}|:)",
        f"({_H}:){{6}}{_V4}",
        f"::({_H}:){{0,5}}{_V4}",
        f"({_H}:){{1,5}}:{_V4}",
    ]
)


def schema_to_rules(
    schema, *, any_whitespace: bool = True, separators=None, strict: bool = False
) -> tuple[dict, str]:
    builder = _Builder(schema, any_whitespace, separators, strict)
    try:
        root = builder.value(schema, "#")
    except RecursionError:
        raise GrammarError(
            "schema nested too deeply (or recursive through allOf/$ref siblings)"
        ) from None
    return {"root": root, **builder.rules}, "root"


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


def _string_literal(text: str) -> tuple:
    """The JSON spelling of a fixed string: printable ASCII as is, what must be escaped in its
    short form (or \\u00XX), other characters raw or as \\uXXXX escapes."""
    parts = [lit('"')]
    for ch in text:
        c = ord(ch)
        if 0x20 <= c < 0x7F and ch not in '"\\':
            parts.append(lit(ch))
        elif ch in '"\\\b\f\n\r\t':
            parts.append(lit(json.dumps(ch)[1:-1]))
        else:
            parts.append(json_chars([(c, c)]))
    parts.append(lit('"'))
    return cat(*parts)


def _number_literal(value) -> tuple:
    if isinstance(value, bool):
        return lit("true" if value else "false")
    if isinstance(value, int) or (
        isinstance(value, float) and value.is_integer() and abs(value) < 1e16
    ):
        k = int(value)
        return alt(lit(str(k)), lit(f"{k}.0"))
    return lit(json.dumps(value))


# -- numbers ------------------------------------------------------------------------------------
def _same_length(a: str, b: str) -> tuple:
    """Digit strings of one length between a and b (inclusive)."""
    if not a:
        return EMPTY
    if a == "0" * len(a) and b == "9" * len(b):
        return rep(("b", _DIGIT), len(a), len(a))
    if a[0] == b[0]:
        return cat(lit(a[0]), _same_length(a[1:], b[1:]))
    n = len(a) - 1
    parts = [cat(lit(a[0]), _same_length(a[1:], "9" * n))]
    if ord(b[0]) - ord(a[0]) > 1:
        parts.append(cat(("b", byte_set((ord(a[0]) + 1, ord(b[0]) - 1))), rep(("b", _DIGIT), n, n)))
    parts.append(cat(lit(b[0]), _same_length("0" * n, b[1:])))
    return alt(*parts)


def _naturals(lo: int, hi: int | None) -> tuple:
    """Decimal spellings (no leading zeros) of the integers lo..hi, hi None = unbounded."""
    if hi is not None and hi < lo:
        return NOTHING
    parts = []
    top = hi if hi is not None else 10 ** len(str(lo)) - 1
    for d in range(len(str(lo)), len(str(top)) + 1):
        a = max(lo, 10 ** (d - 1) if d > 1 else 0)
        b = min(top, 10**d - 1)
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if hi is None:
        parts.append(cat(("b", _DIGIT19), rep(("b", _DIGIT), len(str(lo)), None)))
    return alt(*parts)


_FRAC_ANY = opt(cat(lit("."), rep(("b", _DIGIT), 1, None)))
_FRAC_ZERO = opt(cat(lit("."), rep(lit("0"), 1, None)))
_FRAC_NONZERO = cat(
    lit("."), rep(("b", _DIGIT), 0, None), ("b", _DIGIT19), rep(("b", _DIGIT), 0, None)
)
_EXP = opt(
    cat(
        ("b", byte_set(ord("e"), ord("E"))),
        opt(("b", byte_set(ord("+"), ord("-")))),
        rep(("b", _DIGIT), 1, None),
    )
)
_INT = cat(opt(lit("-")), alt(lit("0"), cat(("b", _DIGIT19), rep(("b", _DIGIT), 0, None))))
_NUMBER = cat(_INT, _FRAC_ANY, _EXP)


def _magnitudes(lo, lo_excl: bool, hi, hi_excl: bool, integer: bool) -> tuple:
    """Unsigned decimals m with lo <(=) m <(=) hi; lo >= 0 and both integers; hi may be None."""
    if integer:
        a = lo + 1 if lo_excl else lo
        b = None if hi is None else (hi - 1 if hi_excl else hi)
        return _naturals(a, b)
    parts = [cat(lit(str(lo)), _FRAC_NONZERO if lo_excl else _FRAC_ANY)]
    if hi is None:
        parts.append(cat(_naturals(lo + 1, None), _FRAC_ANY))
    elif hi == lo:
        return cat(lit(str(lo)), _FRAC_ZERO) if not (lo_excl or hi_excl) else NOTHING
    else:
        if hi - 1 >= lo + 1:
            parts.append(cat(_naturals(lo + 1, hi - 1), _FRAC_ANY))
        if not hi_excl:
            parts.append(cat(lit(str(hi)), _FRAC_ZERO))
    return alt(*parts)


def _number_range(lo, lo_excl, hi, hi_excl, integer: bool) -> tuple:
    if lo is None and hi is None:
        return _INT if integer else _NUMBER
    for name, bound in (("minimum", lo), ("maximum", hi)):
        if bound is not None and not float(bound).is_integer():
            if integer:
                continue
            raise GrammarError(f"{name}: non-integer bounds on numbers are not supported")
    if integer:  # tighten fractional bounds to integers
        if lo is not None:
            lo, lo_excl = (math.floor(lo) + 1, False) if lo_excl else (math.ceil(lo), False)
        if hi is not None:
            hi, hi_excl = (math.ceil(hi) - 1, False) if hi_excl else (math.floor(hi), False)
    lo = None if lo is None else int(lo)
    hi = None if hi is None else int(hi)
    parts = []
    # non-negative side: max(lo, 0) .. hi
    if hi is None or hi > 0 or (hi == 0 and not hi_excl):
        if lo is None or lo < 0:
            parts.append(_magnitudes(0, False, hi, hi_excl, integer))
        else:
            parts.append(_magnitudes(lo, lo_excl, hi, hi_excl, integer))
    # negative side: -m with m > 0 and -hi <= m <= -lo
    if lo is None or lo < 0:
        mlo, mlo_excl = (0, True) if hi is None or hi >= 0 else (-hi, hi_excl)
        mhi, mhi_excl = (None, False) if lo is None else (-lo, lo_excl)
        parts.append(cat(lit("-"), _magnitudes(mlo, mlo_excl, mhi, mhi_excl, integer)))
    return alt(*parts)


def _multiple_of_integers(k: int) -> tuple:
    """Integers divisible by k: a k-state remainder automaton over the decimal digits."""
    from grammars.automaton import EagerDFA

    if k > 1000:
        raise GrammarError("multipleOf: divisors above 1000 are not supported")
    # states: 0 start, 1 after "-", 2 after "0" (final), 3 + r remainder r after a nonzero digit
    n = 3 + k
    trans: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    trans[0] = [(1 << ord("-"), 1), (1 << ord("0"), 2)]
    for start in (0, 1):
        for d in range(1, 10):
            trans[start].append((1 << (0x30 + d), 3 + d % k))
    for r in range(k):
        for d in range(10):
            trans[3 + r].append((1 << (0x30 + d), 3 + (r * 10 + d) % k))
    accept = [False, False, True] + [r == 0 for r in range(k)]
    merged = []
    for tr in trans:  # one entry per target
        by_target: dict[int, int] = {}
        for m, t in tr:
            by_target[t] = by_target.get(t, 0) | m
        merged.append([(m, t) for t, m in by_target.items()])
    return ("dfa", EagerDFA(merged, accept, 0).trimmed())


@functools.lru_cache(maxsize=256)
def _pattern_dfa(pattern: str, search: bool):
    from grammars.automaton import EagerDFA

    return EagerDFA.from_node(regex_to_node(pattern, json_mode=True, search=search))


@functools.lru_cache(maxsize=256)
def _length_dfa(lo: int, hi: int | None):
    """Strings of lo..hi characters (JSON spelling), built directly as a counter automaton."""
    from grammars.automaton import EagerDFA, StateIndex

    if lo > 10_000 or (hi is not None and hi > 10_000):
        raise GrammarError("minLength/maxLength: lengths above 10000 are not supported")
    char = _char_dfa()
    top = hi if hi is not None else lo
    out = EagerDFA()
    states = StateIndex(out, 1 << 30, "")  # size bounded by the 10000 limit above

    def state(i, c):
        return states((i, c), c == char.start and lo <= i and (hi is None or i <= hi))

    out.start = state(0, char.start)
    while states.todo:
        i, c = states.todo.pop()
        trans = out.trans[states.index[(i, c)]]
        for cm, t in char.trans[c]:
            if char.accept[t]:
                j = i + 1 if i < top else (top if hi is None else None)
                if j is None:
                    continue
                trans.append((cm, state(j, char.start)))
            else:
                trans.append((cm, state(i, t)))
    return out.trimmed()


@functools.lru_cache(maxsize=1)
def _char_dfa():
    from grammars.automaton import EagerDFA

    dfa = EagerDFA.from_node(_STRING_CHAR)
    assert not any(dfa.trans[s] for s in range(len(dfa.trans)) if dfa.accept[s])
    return dfa


# -- the builder --------------------------------------------------------------------------------
class _Builder:
    def __init__(self, root, any_whitespace: bool, separators, strict: bool):
        self.root_schema = root
        self.strict = strict
        if any_whitespace:
            ws = rep(_WS, 0, None)
            self.ws = ws
            self.item_sep = cat(ws, lit(","), ws)
            self.key_sep = cat(ws, lit(":"), ws)
            # before a rule reference the whitespace after the separator belongs to the rule
            # (rules start with optional whitespace), so no push follows a whitespace loop
            self.item_sep_push = cat(ws, lit(","))
            self.key_sep_push = cat(ws, lit(":"))
        else:
            item, key = separators or (", ", ": ")
            self.ws = EMPTY
            self.item_sep, self.key_sep = lit(item), lit(key)
            self.item_sep_push, self.key_sep_push = self.item_sep, self.key_sep
        draft = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        self.ref_siblings_apply = "2019-09" in draft or "2020-12" in draft or not draft
        self.rules: dict[str, tuple] = {}
        self._expanding: list[str] = []
        self._recursive: set[str] = set()
        self._ref_nodes: dict[str, tuple] = {}
        self._ref_rules: dict[str, str] = {}

    # -- references --
    def resolve(self, ref: str):
        if not isinstance(ref, str):
            raise GrammarError("$ref must be a string")
        if not ref.startswith("#"):
            raise GrammarError(f"$ref: only local references (#...) are supported, got {ref!r}")
        target = self.root_schema
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

    def ref_node(self, ref: str) -> tuple:
        target, key = self.resolve(ref)
        name = self._ref_rules.get(key)
        if name is not None:
            return ("nt", name)
        if key in self._expanding:  # recursion: this reference becomes a rule
            self._recursive.add(key)
            name = self._ref_rules[key] = f"ref{len(self._ref_rules)}"
            return ("nt", name)
        cached = self._ref_nodes.get(key)
        if cached is not None:
            if node_size(cached) <= _MAX_INLINE_USES:
                return cached
            name = self._ref_rules[key] = f"ref{len(self._ref_rules)}"
            self.rules[name] = cat(self.ws, cached)
            return ("nt", name)
        self._expanding.append(key)
        try:
            node = self.value(target, key)
        finally:
            self._expanding.pop()
        if key in self._recursive:
            self.rules[self._ref_rules[key]] = cat(self.ws, node)
        else:
            self._ref_nodes[key] = node
        return node

    # -- values --
    def any_value(self) -> tuple:
        """Any JSON value; nested values go through the rule "any" (recursion)."""
        if "any" not in self.rules:
            self.rules["any"] = NOTHING  # placeholder while building (recursive)
            self.rules["any"] = cat(self.ws, self._any_body(("nt", "any")))
        return self._any_body(("nt", "any"))

    def _any_body(self, inner) -> tuple:
        ws = self.ws
        array = cat(
            lit("["), opt(cat(inner, rep(cat(self.item_sep_push, inner), 0, None))), ws, lit("]")
        )
        member = cat(self.string_node({}), self.key_sep_push, inner)
        obj = cat(
            lit("{"), ws, opt(cat(member, rep(cat(self.item_sep, member), 0, None))), ws, lit("}")
        )
        return alt(
            lit("null"), lit("true"), lit("false"), _NUMBER, self.string_node({}), array, obj
        )

    def value(self, schema, path: str) -> tuple:
        if schema is True:
            return self.any_value()
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {path} must be an object or a boolean")
        if "$ref" in schema:
            siblings = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
            if not siblings or not self.ref_siblings_apply:
                # before draft 2019-09, keywords beside $ref are ignored
                return self.ref_node(schema["$ref"])
            target, key = self.resolve(schema["$ref"])
            if key in self._expanding:
                raise GrammarError(f"$ref: sibling keywords on a recursive reference ({path})")
            self._expanding.append(key)
            try:
                return self.value(
                    _merge(target, siblings, path) if isinstance(target, dict) else siblings, path
                )
            finally:
                self._expanding.pop()
        unsupported = [k for k in schema if k in _UNSUPPORTED]
        if unsupported:
            raise GrammarError(f"unsupported keyword {unsupported[0]!r} at {path}")
        if any(k in schema for k in _DEPENDENCY_KEYWORDS):
            return self.value(_split_dependencies(schema, path), path)
        if "not" in schema:
            return self.negation(schema, path)
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for i, sub in enumerate(schema["allOf"]):
                sub = self._deref(sub, path)
                merged = _merge(merged, sub, f"{path}/allOf/{i}")
            return self.value(self._expand_alternatives(merged, path), path)
        if "__alternatives" in schema:  # left by merging two anyOf/oneOf
            return self.value(self._expand_alternatives(schema, path), path)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                base = {k: v for k, v in schema.items() if k != key}
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise GrammarError(f"{key} must be a non-empty list at {path}")
                nodes = []
                for i, sub in enumerate(branches):
                    if _constrains(base):
                        if isinstance(sub, dict) and "$ref" in sub:
                            target, _ = self.resolve(sub["$ref"])
                            sub = target
                        sub = _merge(base, sub, f"{path}/{key}/{i}")
                    nodes.append(self.value(sub, f"{path}/{key}/{i}"))
                if key == "oneOf":
                    resolved = [self._deref(b, path) for b in branches]
                    if isinstance(base, dict) and _constrains(base):
                        resolved = [_merge(base, b, path) for b in resolved]
                    undecided = [
                        i
                        for i in range(len(nodes))
                        if any(
                            not self._disjoint(resolved[i], resolved[j], path)
                            for j in range(len(nodes))
                            if j != i
                        )
                    ]
                    _check_exclusive([nodes[i] for i in undecided], path)
                return alt(*nodes)
        if "const" in schema:
            return self.literal(schema["const"], path)
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise GrammarError(f"enum must be a list at {path}")
            types = _types_of(schema)
            kept = [
                v
                for v in values
                if types is None
                or _json_type(v) in types
                or (_json_type(v) == "integer" and "number" in types)
            ]
            return alt(*(self.literal(v, path) for v in kept))
        types = _types_of(schema)
        if types is None:
            types = _implied_types(schema)
        if types is None:
            return self.any_value()
        return alt(*(self.typed(t, schema, path) for t in types))

    def _disjoint(self, a, b, path: str) -> bool:
        """True when no value can match both schemas (by type, const/enum, or a required
        property whose allowed constants differ)."""
        a, b = self._deref(a, path), self._deref(b, path)
        if a is False or b is False:
            return True
        if not isinstance(a, dict) or not isinstance(b, dict):
            return False
        ta, tb = _value_types(a), _value_types(b)
        if ta is not None and tb is not None and not (ta & tb):
            return True
        ca, cb = _constants(a), _constants(b)
        if ca is not None and cb is not None and not any(x in cb for x in ca):
            return True
        pa, pb = a.get("properties") or {}, b.get("properties") or {}
        for name in set(a.get("required") or []) & set(b.get("required") or []):
            if name in pa and name in pb:
                va, vb = self._deref(pa[name], path), self._deref(pb[name], path)
                if isinstance(va, dict) and isinstance(vb, dict):
                    ca, cb = _constants(va), _constants(vb)
                    if ca is not None and cb is not None and not any(x in cb for x in ca):
                        return True
        return False

    def negation(self, schema: dict, path: str) -> tuple:
        """`not`, exact where both sides are regular: the base language minus the negated one."""
        base = {k: v for k, v in schema.items() if k != "not"}
        negated = self._deref(schema["not"], path)
        if isinstance(negated, dict) and set(negated) - _ANNOTATIONS == {"type"}:
            excluded = _types_of(negated) or []
            if "number" in excluded:
                excluded = excluded + ["integer"]
            types = _types_of(base) or ["null", "boolean", "object", "array", "string", "number"]
            kept = [t for t in types if t not in excluded]
            if "number" in types and "integer" in excluded and "number" not in excluded:
                raise GrammarError(f"not: excluding integers from numbers ({path})")
            if not kept:
                return NOTHING
            return self.value({**base, "type": kept}, path)
        base_node = self.value(base, path)
        negated_node = self.value(negated, path + "/not")
        if _has_rules(base_node) or _has_rules(negated_node):
            raise GrammarError(
                f"not: only supported where both sides are non-recursive and fully typed ({path})"
            )
        if node_size(base_node) > 5000 or node_size(negated_node) > 5000:
            raise GrammarError(f"not: schema too large to negate ({path})")
        return difference(base_node, negated_node)

    def _deref(self, sub, path: str):
        while isinstance(sub, dict) and "$ref" in sub:
            target, _ = self.resolve(sub["$ref"])
            extra = {k: v for k, v in sub.items() if k != "$ref"}
            sub = _merge(target, extra, path) if extra else target
        return sub

    def _expand_alternatives(self, schema: dict, path: str) -> dict:
        """anyOf/oneOf lists collected while merging allOf: one anyOf of their combinations."""
        if not isinstance(schema, dict):
            return schema
        groups = list(schema.pop("__alternatives", None) or [])
        if not groups:
            return schema
        for kind in ("anyOf", "oneOf"):
            if kind in schema:
                groups.append((kind, schema.pop(kind)))
        combos = [{}]
        for kind, branches in groups:
            if kind == "oneOf" and len(groups) > 1:
                raise GrammarError(f"oneOf: cannot combine with other alternatives ({path})")
            combos = [_merge(c, self._deref(b, path), path) for c in combos for b in branches]
            if len(combos) > 64:
                raise GrammarError(f"allOf: too many combinations of anyOf/oneOf ({path})")
        out = dict(schema)
        out[groups[0][0] if len(groups) == 1 else "anyOf"] = combos
        return out

    def literal(self, value, path: str) -> tuple:
        ws = self.ws
        if value is None:
            return lit("null")
        if isinstance(value, (bool, int, float)):
            return _number_literal(value)
        if isinstance(value, str):
            return _string_literal(value)
        if isinstance(value, list):
            items = [self.literal(v, path) for v in value]
            if not items:
                return cat(lit("["), ws, lit("]"))
            body = [items[0]] + [cat(self.item_sep, x) for x in items[1:]]
            return cat(lit("["), ws, *body, ws, lit("]"))
        if isinstance(value, dict):
            members = [
                cat(_string_literal(k), self.key_sep, self.literal(v, path))
                for k, v in value.items()
            ]
            if not members:
                return cat(lit("{"), ws, lit("}"))
            body = [members[0]] + [cat(self.item_sep, x) for x in members[1:]]
            return cat(lit("{"), ws, *body, ws, lit("}"))
        raise GrammarError(f"const/enum value of unsupported type at {path}")

    def typed(self, t: str, schema: dict, path: str) -> tuple:
        if t == "null":
            return lit("null")
        if t == "boolean":
            return alt(lit("true"), lit("false"))
        if t in ("integer", "number"):
            return self.number_node(schema, t == "integer", path)
        if t == "string":
            return self.string_node(schema, path)
        if t == "array":
            return self.array_node(schema, path)
        if t == "object":
            return self.object_node(schema, path)
        raise GrammarError(f"type: unknown type {t!r} at {path}")

    def number_node(self, schema: dict, integer: bool, path: str) -> tuple:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        lo_excl = hi_excl = False
        emin, emax = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if isinstance(emin, bool):
            lo_excl = emin and lo is not None
        elif emin is not None and (lo is None or emin >= lo):
            lo, lo_excl = emin, True
        if isinstance(emax, bool):
            hi_excl = emax and hi is not None
        elif emax is not None and (hi is None or emax <= hi):
            hi, hi_excl = emax, True
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise GrammarError(f"{name} must be a number at {path}")
        node = _number_range(lo, lo_excl, hi, hi_excl, integer)
        if "multipleOf" in schema:
            k = schema["multipleOf"]
            if not (integer and isinstance(k, (int, float)) and float(k).is_integer() and k > 0):
                raise GrammarError(f"multipleOf: only integer divisors of integers ({path})")
            if int(k) != 1:
                node = intersect(node, _multiple_of_integers(int(k)))
        return node

    def string_node(self, schema: dict, path: str = "#") -> tuple:
        lo = schema.get("minLength", 0)
        hi = schema.get("maxLength")
        if isinstance(lo, float) and lo.is_integer():
            lo = int(lo)
        if isinstance(hi, float) and hi.is_integer():
            hi = int(hi)
        if not isinstance(lo, int) or (hi is not None and not isinstance(hi, int)):
            raise GrammarError(f"minLength/maxLength must be integers at {path}")
        if hi is not None and hi < lo:
            return NOTHING
        patterns = []
        if "pattern" in schema:
            patterns.append((schema["pattern"], True))
        fmt = schema.get("format")
        if fmt in _FORMATS:
            patterns.append((_FORMATS[fmt], False))
        elif fmt in _UNENFORCED_FORMATS:
            raise GrammarError(f"format: {fmt!r} is not supported ({path})")
        if not patterns:
            if lo == 0 and hi is None:
                return cat(lit('"'), rep(_STRING_CHAR, 0, None), lit('"'))
            return cat(lit('"'), ("dfa", _length_dfa(lo, hi)), lit('"'))
        body = None
        for pattern, search in patterns:
            dfa = _pattern_dfa(pattern, search)
            body = dfa if body is None else body.product(dfa, "and")
        if lo > 0 or hi is not None:
            shortest, longest = body.path_lengths()
            # a character takes 1 to 12 bytes in a JSON string (a surrogate pair escape)
            redundant = (
                shortest >= 12 * lo and longest is not None and (hi is None or longest <= hi)
            )
            if not redundant:
                if hi is not None and hi > 512:
                    raise GrammarError(
                        f"maxLength: {hi} combined with pattern/format is too "
                        f"large to enforce ({path})"
                    )
                body = body.product(_length_dfa(lo, hi), "and")
        return cat(lit('"'), ("dfa", body), lit('"'))

    def array_node(self, schema: dict, path: str) -> tuple:
        if schema.get("uniqueItems") is True:
            raise GrammarError(f"uniqueItems is not supported ({path})")
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems")
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        rest = items
        if isinstance(items, list):  # draft 4-2019 tuple form
            prefix, rest = items, schema.get("additionalItems")
        prefix = prefix or []
        if rest is None:
            rest = not (self.strict and prefix)
        prefix_nodes = [self.value(s, f"{path}/prefixItems/{i}") for i, s in enumerate(prefix)]
        rest_node = self.value(rest, f"{path}/items")
        n = len(prefix_nodes)
        if hi is not None and hi < n:
            prefix_nodes, n = prefix_nodes[:hi], hi
        sep = self.item_sep
        # tail after the prefix: between max(lo - n, 0) and hi - n further items
        tail_lo = max(lo - n, 0)
        tail_hi = None if hi is None else hi - n
        if rest_node == NOTHING:
            tail_hi = 0
            if tail_lo:
                return NOTHING
        if (
            rest_node != NOTHING
            and node_size(rest_node) > 50
            and (tail_hi is None or tail_hi > 2)
            and rest_node[0] != "nt"
        ):
            name = f"items{len(self.rules)}"
            self.rules[name] = cat(self.ws, rest_node)
            rest_node = ("nt", name)

        # build from the end: seq(i) = items i.. with i >= lo required
        def joined(x):
            return cat(self.item_sep_push if x[0] == "nt" else sep, x)

        def tail(first: bool):
            item = rest_node if first else joined(rest_node)
            if tail_hi == 0:
                return EMPTY
            more_lo = max(tail_lo - 1, 0)
            more_hi = None if tail_hi is None else tail_hi - 1
            seq = cat(item, rep(joined(rest_node), more_lo, more_hi))
            return seq if tail_lo > 0 else opt(seq)

        node = None
        for i in reversed(range(n)):
            item = prefix_nodes[i] if i == 0 else joined(prefix_nodes[i])
            after = tail(False) if node is None else node
            seq = cat(item, after)
            node = seq if i < lo else opt(seq)
        body = tail(True) if node is None else node
        if lo > 0 and n == 0 and tail_lo == 0:
            return NOTHING
        first = prefix_nodes[0] if n else rest_node
        lead = EMPTY if first[0] == "nt" else self.ws
        return cat(lit("["), lead, body, self.ws, lit("]"))

    def object_node(self, schema: dict, path: str) -> tuple:
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise GrammarError(f"properties must be an object at {path}")
        required = list(schema.get("required") or [])
        pattern_props = schema.get("patternProperties") or {}
        additional = schema.get("additionalProperties")
        if additional is None:
            additional = not self.strict
        items = []
        names = list(props)
        for name in required:
            if name not in props:
                names.append(name)
        for name in names:
            if name in props:
                sub = props[name]
            else:  # required but only allowed through additional/pattern properties
                sub = self._extra_schema_for(name, pattern_props, additional, path)
            for pat, psub in pattern_props.items():
                if name in props and _regex_search(pat, name):
                    sub = (
                        _merge(sub, psub, f"{path}/patternProperties")
                        if isinstance(sub, dict) and isinstance(psub, dict)
                        else sub
                    )
            key = _string_literal(name)
            value = self.value(sub, f"{path}/properties/{name}")
            key_sep = self.key_sep_push if value[0] == "nt" else self.key_sep
            items.append((cat(key, key_sep, value), name in required))
        count_min = schema.get("minProperties", 0)
        count_max = schema.get("maxProperties")
        extra = self._extra_member(names, pattern_props, additional, path)
        n_required = sum(1 for _, r in items if r)
        if count_min > n_required:
            raise GrammarError(
                f"minProperties is not supported beyond the required properties ({path})"
            )
        if count_max is not None and (extra is not None or count_max < len(items)):
            if count_max < n_required:
                return NOTHING
            raise GrammarError(f"maxProperties is not supported ({path})")
        members = ("members", tuple(items), self.item_sep, extra)
        return cat(lit("{"), self.ws, members, self.ws, lit("}"))

    def _extra_schema_for(self, name, pattern_props, additional, path):
        for pat, psub in pattern_props.items():
            if _regex_search(pat, name):
                return psub
        return additional

    def _extra_member(self, names, pattern_props, additional, path):
        """A member whose key is none of `names`: pattern properties, then additional ones."""
        parts = []
        taken = alt(*(_string_literal(n) for n in names)) if names else None
        pattern_keys = []
        for i, (pat, psub) in enumerate(pattern_props.items()):
            key = cat(lit('"'), regex_to_node(pat, json_mode=True, search=True), lit('"'))
            pattern_keys.append(key)
            for other in pattern_keys[:-1]:
                overlap = intersect(key, other)
                if not overlap[1].is_empty():
                    raise GrammarError(f"patternProperties: overlapping patterns ({path})")
            if taken is not None:
                key = difference(key, taken)
            value = self.value(psub, f"{path}/patternProperties/{i}")
            parts.append(cat(key, self.key_sep_push if value[0] == "nt" else self.key_sep, value))
        if additional is not False:
            key = self.string_node({})
            excluded = [k for k in pattern_keys]
            if taken is not None:
                excluded.append(taken)
            if excluded:
                key = difference(key, alt(*excluded))
            value = self.value(additional, f"{path}/additionalProperties")
            if value != NOTHING:
                parts.append(
                    cat(key, self.key_sep_push if value[0] == "nt" else self.key_sep, value)
                )
        return alt(*parts) if parts else None


# -- schema helpers -----------------------------------------------------------------------------
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


def _regex_search(pattern: str, text: str) -> bool:
    import re

    try:
        return re.search(pattern, text) is not None
    except re.error:
        raise GrammarError(f"pattern: invalid regular expression {pattern!r}") from None


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
        if k in _ANNOTATIONS or k not in out:
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
            out[k] = [x for x in w if x in v]
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


def _check_exclusive(nodes, path: str) -> None:
    """oneOf is enforced as anyOf, which is exact only when no value matches two branches."""
    from grammars.automaton import EagerDFA

    for n in nodes:
        if _has_rules(n) or node_size(n) > 2000:
            raise GrammarError(f"oneOf: branches that may overlap are not supported ({path})")
    dfas = [EagerDFA.from_node(n) for n in nodes]
    for i in range(len(dfas)):
        for j in range(i + 1, len(dfas)):
            if not dfas[i].product(dfas[j], "and").is_empty():
                raise GrammarError(f"oneOf: branches {i} and {j} overlap ({path})")


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
