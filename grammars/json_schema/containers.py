"""Arrays and objects: prefixItems/items with item counts; properties, required,
patternProperties and additionalProperties."""

from __future__ import annotations

import functools

from grammars.automaton import (
    EMPTY,
    NOTHING,
    EagerDFA,
    alt,
    cat,
    difference,
    intersect,
    lit,
    opt,
    rep,
)
from grammars.errors import GrammarError
from grammars.json_schema.constants import constants_node
from grammars.json_schema.core import node_size
from grammars.json_schema.rewrite import _merge
from grammars.json_schema.strings import _string_literal, string_node
from grammars.regex import regex_to_node


class _ContainerNodes:
    """The builder's array and object nodes, mixed into _Builder: they use its value(), rules,
    strict and separators (ws, item_sep, key_sep and their _push forms)."""

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
        taken = constants_node(names, _key_literal, path) if names else None
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
            key = string_node({})
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
