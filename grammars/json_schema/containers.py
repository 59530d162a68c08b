"""Arrays and objects: prefixItems/items with item counts; properties, required,
patternProperties and additionalProperties."""

from __future__ import annotations

import functools
import json

from grammars.automaton import (
    EMPTY,
    NOTHING,
    EagerDFA,
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
from grammars.json_schema.constants import (
    constant_values,
    constants_node,
    only_constants,
    scalar_key,
)
from grammars.json_schema.core import _ANNOTATIONS, _types_of, array_parts, node_size, shared
from grammars.json_schema.numbers import _NUMBER, bounded_digits
from grammars.json_schema.rewrite import _merge
from grammars.json_schema.strings import _string_literal, key_except, key_node, string_node
from grammars.members import REPEATING
from grammars.regex import regex_to_node

_MAX_CONTAINED = 8  # minContains: the designated items are each a copy of the item node
_MAX_UNIQUE_VALUES = 8  # uniqueItems: the automaton tracks which values were used (2**n)
_MAX_COUNTED = 200_000  # nodes of an object whose members are counted, over all count tracks
_MAX_ANY_ORDER = 50_000  # nodes of an object whose members come in any order
_MEMBER_COPIES = 4096  # nodes the copies of one member in any order may take before it is a rule
_WS = ("b", byte_set(0x20, 0x09, 0x0A, 0x0D))  # a whitespace byte


@functools.lru_cache(maxsize=64)
def _separators(any_whitespace: bool, separators: tuple | None, max_ws: int | None) -> tuple:
    """(whitespace, item separator, key separator, the two before a rule reference, the
    item and key separators between an object's members): the same nodes for every schema
    compiled with these options."""
    if any_whitespace:
        ws = rep(_WS, 0, max_ws)
        item_sep, key_sep = cat(ws, lit(","), ws), cat(ws, lit(":"), ws)
        # before a rule reference the whitespace after the separator belongs to the rule
        # (rules start with optional whitespace), so no push follows a whitespace loop
        item_push, key_push = cat(ws, lit(",")), cat(ws, lit(":"))
    else:
        item, key = separators or (", ", ": ")
        ws, item_sep, key_sep = EMPTY, lit(item), lit(key)
        item_push, key_push = item_sep, key_sep
    # the separators between an object's members, one node for all of them
    return ws, item_sep, key_sep, item_push, key_push, shared(item_sep), shared(key_sep)


@functools.lru_cache(maxsize=64)
def any_body(any_whitespace: bool, separators: tuple | None, max_ws, max_digits) -> tuple:
    """Any JSON value, nested ones through the rule "any" (the rule: whitespace, then this):
    one node for every schema compiled with these options."""
    ws, item_sep, _, item_push, key_push, _, _ = _separators(any_whitespace, separators, max_ws)
    inner = ("nt", "any")
    array = cat(lit("["), opt(cat(inner, rep(cat(item_push, inner), 0, None))), ws, lit("]"))
    member = cat(string_node({}), key_push, inner)
    obj = cat(lit("{"), ws, opt(cat(member, rep(cat(item_sep, member), 0, None))), ws, lit("}"))
    number = bounded_digits(_NUMBER, max_digits)
    return shared(alt(lit("null"), lit("true"), lit("false"), number, string_node({}), array, obj))


class _ContainerNodes:
    """The builder's array and object nodes, mixed into _Builder: they use its value(), rules,
    strict and separators (ws, item_sep, key_sep and their _push forms)."""

    def array_node(self, schema: dict, path: str) -> tuple:
        lo = _count(schema, "minItems", 0, path)
        hi = _count(schema, "maxItems", None, path)
        if hi is not None and hi < lo:
            return NOTHING  # no array has that many items
        if not isinstance(schema.get("uniqueItems", False), bool):
            raise GrammarError(f"uniqueItems must be a boolean at {path}")
        if "contains" in schema and _count(schema, "minContains", 1, path) > 0:
            return self._contains_array(schema, lo, hi, path)
        if (
            schema.get("uniqueItems") is True
            and not (hi is not None and hi <= 1)  # one item is always unique
            and id(schema) not in self.unique_by_matcher  # checked by the matcher
        ):
            return self._unique_array(schema, lo, hi, path)
        prefix, rest = array_parts(schema, path)
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
            and node_size(rest_node, 50) > 50
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

    def _contains_array(self, schema: dict, lo: int, hi, path: str) -> tuple:
        """`contains`: at least minContains of the items match it. The items are written as
        runs of any items around that many designated ones, each matching both `items` and
        `contains` (exact: an array qualifies exactly when such a choice exists)."""
        need = _count(schema, "minContains", 1, path)
        if need > _MAX_CONTAINED:
            raise GrammarError(f"minContains: more than {_MAX_CONTAINED} is not supported ({path})")
        if schema.get("prefixItems") or isinstance(schema.get("items"), list):
            raise GrammarError(f"contains: with prefixItems is not supported ({path})")
        if schema.get("uniqueItems") is True:
            raise GrammarError(f"contains: with uniqueItems is not supported ({path})")
        if hi is not None or lo > need:
            raise GrammarError(f"contains: with minItems/maxItems is not supported ({path})")
        items = schema.get("items", True)
        any_node = self.value(items, f"{path}/items")
        contained = self.value(
            _merge(self._deref(items, path), self._deref(schema["contains"], path), path),
            f"{path}/contains",
        )
        if contained == NOTHING:
            return NOTHING

        def joined(x):  # an item after the one before it
            return cat(self.item_sep_push if x[0] == "nt" else self.item_sep, x)

        def lead(x):  # the first item (rules begin with their own whitespace)
            return cat(EMPTY if x[0] == "nt" else self.ws, x)

        more = rep(joined(any_node), 0, None) if any_node != NOTHING else EMPTY
        first = alt(lead(contained), cat(lead(any_node), more, joined(contained)))
        body = cat(first, *[cat(more, joined(contained)) for _ in range(need - 1)], more)
        return cat(lit("["), body, self.ws, lit("]"))

    def _unique_array(self, schema: dict, lo: int, hi, path: str) -> tuple:
        """uniqueItems over a few scalar constants: arrays of lo..hi items in which each value
        appears at most once (one automaton per value, intersected)."""
        values = self._item_values(schema, path)
        if values is None or len(values) > _MAX_UNIQUE_VALUES:
            # (over more values, or others, uniqueness is not regular: docs/grammars.md)
            raise GrammarError(
                f"uniqueItems is not supported ({path}): only over at most 8 constants, or over "
                "strings limited at most by minLength in an array placed by properties, items, "
                "allOf, $ref or anyOf/oneOf branches of distinct types or picked by a first "
                "constant"
            )
        literals = [self.literal(v, path) for v in values]
        sep = self.item_sep

        def array(body) -> tuple:
            return alt(
                cat(lit("["), self.ws, lit("]")), cat(lit("["), self.ws, body, self.ws, lit("]"))
            )

        item = alt(*literals)
        more = max(lo - 1, 0), None if hi is None else hi - 1
        node = cat(lit("["), self.ws, item, rep(cat(sep, item), *more), self.ws, lit("]"))
        if lo == 0:
            node = alt(node, cat(lit("["), self.ws, lit("]")))
        for i, once in enumerate(literals):
            others = alt(*(x for j, x in enumerate(literals) if j != i))
            no_repeat = cat(rep(cat(others, sep)), once, rep(cat(sep, others)))
            node = intersect(node, array(alt(cat(others, rep(cat(sep, others))), no_repeat)))
        return node

    def _item_values(self, schema: dict, path: str) -> list | None:
        """The distinct values (1 and 1.0 are one) an array's items are limited to, when they
        are a few scalar constants or booleans and nulls; None otherwise."""
        if schema.get("prefixItems") or isinstance(schema.get("items"), list):
            return None
        items = self._deref(schema.get("items", True), path)
        if only_constants(items):
            values = self._admitted(constant_values(items, path), items, path)
        elif isinstance(items, dict) and set(items) - _ANNOTATIONS == {"type"}:
            types = _types_of(items) or []
            if set(types) - {"boolean", "null"}:
                return None
            values = [
                v for t, v in (("boolean", True), ("boolean", False), ("null", None)) if t in types
            ]
        else:
            return None
        distinct = {}
        for v in values:
            key = scalar_key(v)
            if key is None:
                return None
            distinct.setdefault(key, v)
        return list(distinct.values())

    def object_node(self, schema: dict, path: str, needs=None) -> tuple:
        """An object of `schema`; `needs` (names of properties it lists): sets of names one of
        which must all be present, kept by one automaton (members.fixed_order)."""
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise GrammarError(f"properties must be an object at {path}")
        required = schema.get("required") or []
        if type(required) is not list or not all(type(n) is str for n in required):
            raise GrammarError(f"required must be a list of strings at {path}")
        pattern_props = schema.get("patternProperties") or {}
        additional = schema.get("additionalProperties")
        if additional is None and "additionalProperties" in schema:
            raise GrammarError(f"additionalProperties must be a schema, not null ({path})")
        if additional is None:
            additional = not self.strict
        items = []
        names = list(props)
        for name in required:
            if name not in props:
                names.append(name)
        key_names = self._key_names(schema, path)
        for name in names:
            if name in props:
                sub = props[name]
            else:  # required but only allowed through additional/pattern properties
                sub = self._extra_schema_for(name, pattern_props, additional, path)
            if key_names is not None and not _names_key(key_names, name):
                sub = False
            for pat, psub in pattern_props.items():
                if name in props and _regex_search(pat, name):  # both schemas apply
                    if not isinstance(sub, (bool, dict)) or not isinstance(psub, (bool, dict)):
                        raise GrammarError(f"schema at {path}/patternProperties must be a schema")
                    sub = _merge(sub, psub, f"{path}/patternProperties")
            key = _string_literal(name)
            value = self.value(sub, f"{path}/properties/{name}")
            key_sep = self.key_sep_push if value[0] == "nt" else self.member_key_sep
            items.append((cat(key, key_sep, value), name in required))
        extra = self._extra_member(names, pattern_props, additional, path, key_names)
        if extra is not None and not all(
            _asserts_nothing(s) for s in (*pattern_props.values(), additional) if s is not False
        ):
            # an extra key may be written twice, each value checked; a reader keeps the last,
            # which a branch that refuses the first may accept: inexact for oneOf and not
            self.inexact["repeat"] += 1
        counts = self._member_counts(schema, items, extra, path)
        if counts is None:
            return NOTHING
        any_order = (self.property_order == "any" or id(schema) in self.any_order_objects) and len(
            items
        ) + (extra is not None) > 1
        sep = self.member_sep
        if any_order:
            items, extra = self._member_rules(items, extra)
        if needs is not None:  # (in the schema's order only: the builder checks)
            index = {name: i for i, name in enumerate(names)}
            needs = frozenset(frozenset(index[name] for name in n) for n in needs)
        members = ("members", tuple(items), sep, extra, counts, any_order, needs)
        if any_order and node_size(members, _MAX_ANY_ORDER, True) > _MAX_ANY_ORDER:
            # too many sets of properties to track: keys may come again, each value checked
            # (as extra keys may), or else the schema's order
            members = ("members", tuple(items), sep, extra, counts, REPEATING, None)
            if counts == (0, None) and node_size(members, _MAX_ANY_ORDER, True) <= _MAX_ANY_ORDER:
                self.inexact["repeat"] += 1
            else:
                any_order = False
                members = ("members", tuple(items), sep, extra, counts, False, None)
        if not any_order and len(items) + (extra is not None) > 1:  # members in one order
            self.inexact["order"] += 1
        return cat(lit("{"), self.ws, members, self.ws, lit("}"))

    def object_literal(self, value: dict, path: str) -> tuple:
        """An object constant: its members in the order written, or with property_order="any"
        in any order (each once) where that automaton stays small."""
        parts = [(_string_literal(k), self.literal(v, path)) for k, v in value.items()]
        if self.property_order == "any" and len(parts) > 1:
            items = tuple((cat(key, self.member_key_sep, val), True) for key, val in parts)
            members = ("members", items, self.member_sep, None, (0, None), True, None)
            # copies of the members, no rules (_member_rules): a constant stays one automaton,
            # which oneOf's and not's automaton operations can take
            if node_size(members, _MAX_ANY_ORDER, True) <= _MAX_ANY_ORDER:
                return cat(lit("{"), self.ws, members, self.ws, lit("}"))
        written = [cat(key, self.key_sep, val) for key, val in parts]
        return self.written_in_order("{", written, "}")

    def written_in_order(self, open_: str, parts: list, close: str) -> tuple:
        """`parts` in their order between `open_` and `close`, separated as array items."""
        ws = self.ws
        if not parts:
            return cat(lit(open_), ws, lit(close))
        body = [parts[0]] + [cat(self.item_sep, x) for x in parts[1:]]
        return cat(lit(open_), ws, *body, ws, lit(close))

    def _member_rules(self, items: list, extra) -> tuple[list, tuple | None]:
        """Members in any order are built once per set of members they lead to, and extra
        members once per set: when copies would make them too large, every member (and the
        extra member) becomes a rule of its own, one move per copy, matched by pushing a
        frame (and a rule's automaton holds no copies of the objects inside it)."""
        sets = 1 << len(items)
        parts = [item for item, _ in items] + ([extra] if extra is not None else [])
        if not any(node_size(p, _MEMBER_COPIES) * sets > _MEMBER_COPIES for p in parts):
            return items, extra
        return [(self._rule_of(item), required) for item, required in items], (
            None if extra is None else self._rule_of(extra)
        )

    def _rule_of(self, node) -> tuple:
        name = f"member{self._member_rule_count}"
        self._member_rule_count += 1
        self.rules[name] = node
        return ("nt", name)

    def _member_counts(self, schema: dict, items: list, extra, path: str):
        """(lo, hi) members the object must hold for minProperties/maxProperties, (0, None)
        where the properties alone keep within them; None when no count is possible."""
        lo = _count(schema, "minProperties", 0, path)
        hi = _count(schema, "maxProperties", None, path)
        most = len(items) if extra is None else None  # the most members an object can hold
        if (hi is not None and hi < lo) or (most is not None and lo > most):
            return None
        if lo <= sum(1 for _, required in items if required):
            lo = 0  # the required properties are enough
        if hi is not None and most is not None and hi >= most:
            hi = None
        if extra is not None and hi is not None:
            self.inexact["counts"] += 1  # a repeated extra key counts twice toward hi
        if extra is not None and lo >= 2:
            # keys outside the named ones may repeat, and a repeated key is one property: only
            # the named properties and one other member count toward lo (automaton._members)
            if lo > len(items) + 1:
                raise GrammarError(
                    f"minProperties: {lo} distinct keys cannot be enforced where keys outside "
                    f"the named properties may repeat ({path})"
                )
            self.inexact["counts"] += 1
        if (lo, hi) != (0, None):
            members = ("members", tuple(items), self.item_sep, extra, (lo, hi), False, None)
            if node_size(members, _MAX_COUNTED, True) > _MAX_COUNTED:
                raise GrammarError(
                    f"minProperties/maxProperties: too many properties to count ({path})"
                )
        return lo, hi

    def _extra_schema_for(self, name, pattern_props, additional, path):
        """The schema of a property named only by `required`: every pattern it matches, or
        else additionalProperties."""
        found = [psub for pat, psub in pattern_props.items() if _regex_search(pat, name)]
        if not found:
            return additional
        out = True
        for psub in found:
            out = _merge(out, psub, f"{path}/patternProperties")
        return out

    def _key_names(self, schema: dict, path: str):
        """The automaton of the keys propertyNames allows (a string schema: keys are strings),
        or None without propertyNames."""
        if "propertyNames" not in schema:
            return None
        if not isinstance(schema["propertyNames"], (dict, bool)):
            raise GrammarError(f"schema at {path}/propertyNames must be an object or a boolean")
        names = self.value(
            _merge({"type": "string"}, schema["propertyNames"], path), f"{path}/propertyNames"
        )
        if names[0] == "nt" or node_size(names, 5000, True) > 5000:
            raise GrammarError(f"propertyNames: schema too large for keys ({path})")
        return ("dfa", EagerDFA.from_node(names))

    def _extra_member(self, names, pattern_props, additional, path, key_names=None):
        """A member whose key is none of `names` (and one propertyNames allows): pattern
        properties, then additional ones."""
        parts = []
        taken = constants_node(names, _key_literal, path) if names and pattern_props else None
        pattern_keys = _pattern_keys(pattern_props, path)
        for i, (key, psub) in enumerate(zip(pattern_keys, pattern_props.values())):
            if taken is not None:
                key = difference(key, taken)
            if key_names is not None:
                key = intersect(key, key_names)
            value = self.value(psub, f"{path}/patternProperties/{i}")
            parts.append(cat(key, self.key_sep_push if value[0] == "nt" else self.key_sep, value))
        if additional is not False:
            plain = None if pattern_keys else key_except(tuple(names))
            key = key_node() if plain is None else ("dfa", plain)
            excluded = [] if plain is not None else list(pattern_keys)
            if names and plain is None:
                excluded.append(taken or constants_node(names, _key_literal, path))
            if excluded:
                key = difference(key, alt(*excluded))
            if key_names is not None:
                key = intersect(key, key_names)
            value = self.value(additional, f"{path}/additionalProperties")
            if value != NOTHING:
                parts.append(
                    cat(key, self.key_sep_push if value[0] == "nt" else self.key_sep, value)
                )
        return alt(*parts) if parts else None


def _pattern_keys(pattern_props: dict, path: str) -> list:
    """The key automaton of each pattern property. A key under two patterns must match both
    schemas, where the members are alternatives (one of them matches): exact when both are
    the same, or one decides alone (the other asserts nothing, or it is false), the other's
    keys leaving it out; any other overlap is an error."""
    keys = [
        cat(lit('"'), regex_to_node(pat, search=True, key_mode=True), lit('"'))
        for pat in pattern_props
    ]
    subs = list(pattern_props.values())
    out = list(keys)
    for i in range(len(keys)):
        for j in range(i):
            if intersect(keys[i], keys[j])[1].is_empty():
                continue
            if json.dumps(subs[i], sort_keys=True) == json.dumps(subs[j], sort_keys=True):
                continue
            if _asserts_nothing(subs[i]) or subs[j] is False:  # j's schema decides alone
                out[i] = difference(out[i], keys[j])
            elif _asserts_nothing(subs[j]) or subs[i] is False:
                out[j] = difference(out[j], keys[i])
            else:
                raise GrammarError(f"patternProperties: overlapping patterns ({path})")
    return out


def _asserts_nothing(schema) -> bool:
    return schema is True or (isinstance(schema, dict) and not set(schema) - _ANNOTATIONS)


def _count(schema: dict, key: str, default, path: str):
    value = schema.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if value is not default and (
        isinstance(value, bool) or not isinstance(value, int) or value < 0
    ):
        raise GrammarError(f"{key} must be a non-negative integer at {path}")
    return value


def _names_key(key_names: tuple, name: str) -> bool:
    """propertyNames allows `name` (its spelling as json.dumps writes it)."""
    return key_names[1].accepts(json.dumps(name).encode("utf-8", "surrogatepass"))


def _key_literal(name: str, path: str) -> tuple:
    return _string_literal(name)


def _regex_search(pattern: str, text: str) -> bool:
    """re.search by the engine's own automaton: linear in the text, where the re module may
    backtrack for ever on a pattern such as (a+)+$ (holding the GIL all the while)."""
    if not isinstance(pattern, str):
        raise GrammarError(f"pattern: {pattern!r} is not a string")
    return _search_dfa(pattern).accepts(text.encode("utf-8", "surrogatepass"))


@functools.lru_cache(maxsize=256)
def _search_dfa(pattern: str) -> EagerDFA:
    return EagerDFA.from_node(regex_to_node(pattern, search=True))
