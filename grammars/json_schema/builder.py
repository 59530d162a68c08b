"""The schema walker: $ref resolution, type dispatch and the combinators (anyOf, oneOf, allOf,
not, enum, const)."""

from __future__ import annotations

from collections import Counter
from itertools import compress

from grammars.automaton import (
    NOTHING,
    EagerDFA,
    alt,
    cat,
    difference,
    intersect,
    lit,
)
from grammars.budget import checkpoint
from grammars.errors import GrammarError
from grammars.fragments import keep
from grammars.grammar import texts_accepted
from grammars.json_schema.constants import (
    MIN_LITERAL_SET,
    beside_constants,
    constant_values,
    constants_node,
    only_constants,
    spellings,
)
from grammars.json_schema.containers import (
    _ContainerNodes,
    _regex_search,
    _separators,
    any_body,
)
from grammars.json_schema.core import (
    _ANNOTATIONS,
    _DEPENDENCY_KEYWORDS,
    _UNSUPPORTED,
    _constrains,
    _has_rules,
    _implied_types,
    _json_type,
    _types_of,
    check_ref_scopes,
    locate,
    node_size,
    resolve_ref,
    shared,
)
from grammars.json_schema.instances import finite_values, matches
from grammars.json_schema.negation import canonical_texts, complement, conditional
from grammars.json_schema.numbers import (
    FRACTIONAL,
    _number_literal,
    number_node,
)
from grammars.json_schema.one_of import (
    OneOfProofs,
    exclusive_dfas,
    needed_sets,
    presence_variants,
    text_complete,
)
from grammars.json_schema.rewrite import _merge, _split_dependencies, draft_level, in_draft
from grammars.json_schema.strings import RESTRICTED_FORMATS, _string_literal, string_node
from grammars.json_schema.unique import UniquePlan

_MAX_INLINE_USES = 300  # nodes in a definition above which a second use becomes a rule
MAX_NESTING = 200  # schemas (subschemas, $refs) nested in one another


def schema_to_rules(
    schema,
    *,
    any_whitespace: bool = True,
    separators=None,
    strict: bool = False,
    max_whitespace_cnt: int | None = None,
    max_number_digits: int | None = None,
    property_order: str = "schema",
    checks: list | None = None,
    text: str | None = None,
) -> tuple[dict, str]:
    """(rules, root) of the documents `schema` accepts; with any_whitespace, each run of
    whitespace between tokens holds at most `max_whitespace_cnt` characters (None: any); each
    run of digits in a number not bounded by the schema holds at most `max_number_digits`;
    property_order "any" lets an object's properties come in any order (see object_node).
    With a list as `checks`, uniqueItems over free strings is left to the matcher: the
    json_schema.unique.UniquePlan it needs is appended there (when there is one). `text`, the
    schema as compact JSON (separators "," and ":") when the caller has it, spares walks of the
    schema for keywords that are not written there."""
    if property_order not in ("schema", "any"):
        raise GrammarError(f"property_order must be 'schema' or 'any', not {property_order!r}")
    try:
        schema = in_draft(schema, draft_level(schema), text)
        builder = _Builder(
            schema, any_whitespace, separators, strict, max_whitespace_cnt, max_number_digits
        )
        id_key = "id" if builder.draft == "draft-04" else "$id"
        if text is None or (f'"{id_key}":"' in text and '"$ref":"#' in text):  # else no scope
            check_ref_scopes(schema, id_key)
        builder.property_order = property_order
        if checks is not None:
            plan = UniquePlan(builder.root_schema, builder.ref_siblings_apply, property_order)
            builder.unique_by_matcher = plan.tracked
            if plan.root is not None:
                checks.append(plan)
        root = builder.value(schema, "#")
    except RecursionError:
        raise GrammarError(
            "schema nested too deeply (or recursive through allOf/$ref siblings)"
        ) from None
    except GrammarError:
        raise
    except (TypeError, AttributeError, ValueError, KeyError, IndexError) as exc:
        # a keyword of the wrong shape that no check caught first ({"required": 1}, ...)
        raise GrammarError(f"malformed schema ({type(exc).__name__}: {exc})") from None
    return {"root": root, **builder.rules}, "root"


# -- the builder --------------------------------------------------------------------------------


_COMBINATORS = frozenset(("anyOf", "oneOf", "allOf", "__alternatives"))
_DEPENDENCIES = frozenset(_DEPENDENCY_KEYWORDS)


class _Builder(_ContainerNodes):
    def __init__(
        self,
        root,
        any_whitespace: bool,
        separators,
        strict: bool,
        max_ws: int | None = None,
        max_digits: int | None = None,
    ):
        self.root_schema = root
        self.options = (any_whitespace, separators, strict, max_ws, max_digits)
        self.strict = strict
        self.max_digits = max_digits  # longest digit run of an unbounded number (None: any)
        (
            self.ws,
            self.item_sep,
            self.key_sep,
            self.item_sep_push,
            self.key_sep_push,
            self.member_sep,
            self.member_key_sep,
        ) = _separators(any_whitespace, tuple(separators) if separators else None, max_ws)
        draft = str(root.get("$schema", "")) if isinstance(root, dict) else ""
        self.ref_siblings_apply = "2019-09" in draft or "2020-12" in draft or not draft
        self.draft = (
            "2019-09" if "2019-09" in draft else "2020-12" if self.ref_siblings_apply else "older"
        )
        if "draft-04" in draft or "draft-03" in draft:
            self.draft = "draft-04"  # where 2.0 is no integer
        self.rules: dict[str, tuple] = {}
        self.property_order = "schema"  # or "any"
        self.any_order_objects: set[int] = set()  # ids of object schemas taken in any order
        self.unique_by_matcher: set[int] = set()  # ids of arrays whose uniqueItems the
        # matcher checks (json_schema/unique.py)
        self._member_rule_count = 0  # rules made of members in any order (_member_rules)
        self._expanding: list[str] = []
        self._recursive: set[str] = set()
        self._ref_nodes: dict[str, tuple] = {}
        self._any: tuple | None = None  # any_value()
        self._wrappers: dict[int, tuple] = {}  # _shared_node()
        self._ref_rules: dict[str, str] = {}
        self._depth = 0  # value() calls under way
        # restrictions met so far, by kind (see _INEXACT): a node built under one refuses some
        # valid texts, so it must not be the excluded side of a difference or overlap check
        self.inexact: Counter = Counter()
        self._ref_inexact: dict[str, Counter] = {}

    # -- references --
    def resolve(self, ref: str):
        return resolve_ref(self.root_schema, ref)

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
            if node_size(cached, _MAX_INLINE_USES) <= _MAX_INLINE_USES:
                self.inexact.update(self._ref_inexact.get(key, Counter()))
                return cached
            name = self._ref_rules[key] = f"ref{len(self._ref_rules)}"
            self.rules[name] = cat(self.ws, cached)
            return ("nt", name)
        self._expanding.append(key)
        before = Counter(self.inexact)
        try:
            node = self.value(target, key)
        finally:
            self._expanding.pop()
        self._ref_inexact[key] = self.inexact - before
        if key in self._recursive:
            self.rules[self._ref_rules[key]] = cat(self.ws, node)
        else:
            node = self._ref_nodes[key] = shared(node)  # every use inlines the same node
        return node

    # -- values --
    def any_value(self) -> tuple:
        """Any JSON value; nested values go through the rule "any" (recursion)."""
        if self._any is None:
            self.rules["any"] = NOTHING  # the rule's place, before the rules the value adds
            any_ws, separators, _, max_ws, max_digits = self.options
            separators = tuple(separators) if separators else None
            # one node for every use, and for every schema compiled with these options
            self._any = keep(any_body(any_ws, separators, max_ws, max_digits))
            self.rules["any"] = cat(self.ws, self._any)
        return self._any

    def value(self, schema, path: str) -> tuple:
        """The node of `schema` (at `path`, for messages)."""
        if self._depth >= MAX_NESTING:  # before Python's own limit, whatever that is set to
            raise GrammarError(f"schema nested more than {MAX_NESTING} levels deep ({path[:200]})")
        checkpoint()
        self._depth += 1
        try:
            return self._value(schema, path)
        except GrammarError as exc:
            locate(exc, path)  # the innermost subschema left names the place
            raise
        finally:
            self._depth -= 1

    def _value(self, schema, path: str) -> tuple:
        if schema is True:
            return self.any_value()
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {path} must be an object or a boolean")
        if ("const" in schema or "enum" in schema) and (
            "$ref" not in schema or self.ref_siblings_apply
        ):
            values = constant_values(schema, path)
            verdicts = self._verdicts(values, schema)
            if None not in verdicts:  # every constant decided on its value: no other node
                return self.constants(list(compress(values, verdicts)), path)
        elif not _COMBINATORS.isdisjoint(schema):
            values = finite_values(schema, self.resolve, ref_siblings=self.ref_siblings_apply)
            if values is not None:  # combinators over constants: each value judged whole
                verdicts = [self._matches(v, schema) for v in values]
                if None not in verdicts:
                    return self.constants(list(compress(values, verdicts)), path)
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
        if "if" in schema:
            return self.value(conditional(schema), path)
        if not _UNSUPPORTED.isdisjoint(schema):  # (set operations: ~10 of these a schema)
            unsupported = next(k for k in schema if k in _UNSUPPORTED)
            raise GrammarError(f"unsupported keyword {unsupported!r} at {path}")
        if not _DEPENDENCIES.isdisjoint(schema):
            return self.value(_split_dependencies(schema, path), path)
        if "not" in schema:
            return self.negation(schema, path)
        if "allOf" in schema:
            if type(schema["allOf"]) is not list or not schema["allOf"]:
                raise GrammarError(f"allOf must be a non-empty list at {path}")
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for i, sub in enumerate(schema["allOf"]):
                sub = self._deref(sub, path)
                merged = _merge(merged, sub, f"{path}/allOf/{i}")
            return self.value(self._expand_alternatives(merged, path), path)
        if "__alternatives" in schema:  # left by merging two anyOf/oneOf
            return self.value(self._expand_alternatives(schema, path), path)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.alternatives(schema, key, path)
        values = constant_values(schema, path)
        if values is not None:
            return self.constants(self._admitted(values, schema, path), path)
        types = _types_of(schema)
        if types is None:
            types = _implied_types(schema)
        if types is None:
            return self.any_value()
        return alt(*(self.typed(t, schema, path) for t in types))

    def _admitted(self, values: list, schema: dict, path: str) -> list:
        """The constants that also match the keywords beside const / enum (a const must be in
        a sibling enum; a value of another type, out of bounds or of the wrong shape is
        dropped): those the node of the other keywords accepts. That node is sound, so a value
        kept matches them; a valid value it refuses (a restriction) is dropped too."""
        rest = beside_constants(schema)
        if rest is None:
            return values
        verdicts = [self._matches(v, rest) for v in values]
        undecided = [v for v, known in zip(values, verdicts) if known is None]
        if not undecided:
            return list(compress(values, verdicts))
        if "type" not in rest:  # only the constants' own types need checking
            rest["type"] = sorted(
                {"number" if t == "integer" else t for t in map(_json_type, undecided)}
            )
        node = self.value(rest, path)
        separators = (",", ":") if self.options[0] else (self.options[1] or (", ", ": "))
        texts = [spellings(v, separators, self.draft == "draft-04") for v in undecided]
        flat = [t for spellings in texts for t in spellings]
        if not _has_rules(node):
            accepts = EagerDFA.from_node(node).accepts
            accepted = dict(zip(flat, map(accepts, flat)))
        else:  # containers whose members need rules
            try:
                found = texts_accepted({"__constants": node, **self.rules}, "__constants", flat)
            except GrammarError:  # a rule still being built
                raise GrammarError(
                    f"const/enum beside keywords on a recursive schema ({path})"
                ) from None
            accepted = dict(zip(flat, found))
        admitted = iter(any(map(accepted.get, spellings)) for spellings in texts)
        return [
            v for v, known in zip(values, verdicts) if (next(admitted) if known is None else known)
        ]

    def _verdicts(self, values: list, schema: dict) -> list:
        """instances.matches of each constant against the keywords beside const / enum (the
        constants of an enum are its members already; a const must be in a sibling enum)."""
        rest = beside_constants(schema)
        return [True] * len(values) if rest is None else [self._matches(v, rest) for v in values]

    def _matches(self, value, schema) -> bool | None:
        return matches(
            value,
            schema,
            self.resolve,
            strict=self.strict,
            ref_siblings=self.ref_siblings_apply,
            draft=self.draft,
        )

    def alternatives(self, schema: dict, key: str, path: str) -> tuple:
        """anyOf / oneOf, the keywords beside it merged into each branch; the branches that are
        only constants, when there are many, share one node of all their values."""
        base = {k: v for k, v in schema.items() if k != key}
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise GrammarError(f"{key} must be a non-empty list at {path}")
        derefs = [self._deref(b, path) for b in branches]
        if key == "anyOf" and self.property_order != "any":
            needs = needed_sets(base, derefs)
            if needs is not None:  # branches that only list required keys: one object
                return self.object_node(base, path, needs)
        if key == "oneOf":
            variants = presence_variants(base, derefs)
            if variants is not None:  # branches that only say which keys are present
                # their members in any order, as the automata that make overlapping branches
                # exclusive (the objects inside them in the builder's order)
                self.any_order_objects.update(id(v) for v in variants)
                return alt(*(self.value(v, f"{path}/{key}") for v in variants))
        merged = _constrains(base)
        subs = [
            _merge(base, sub, f"{path}/{key}/{i}") if merged else branches[i]
            for i, sub in enumerate(derefs)
        ]
        constant = [i for i, sub in enumerate(subs) if only_constants(sub)]
        if len(constant) < MIN_LITERAL_SET:
            constant = []
        shared = set(constant)
        before = Counter(self.inexact)
        nodes = {
            i: self.value(sub, f"{path}/{key}/{i}") for i, sub in enumerate(subs) if i not in shared
        }
        if key == "oneOf":
            resolved = subs if merged else derefs
            proofs = self._one_of_proofs(path)
            undecided = proofs.overlapping(resolved)
            try:
                if undecided and self.inexact - before:
                    exact = self._exact_nodes([subs[i] for i in undecided], path)
                else:
                    exact = [
                        nodes[i] if i in nodes else self.value(subs[i], f"{path}/{key}/{i}")
                        for i in undecided
                    ]
                complete = all(text_complete(resolved[i]) for i in undecided)
                only = exclusive_dfas(exact, path, complete)
                if only is not None:  # the texts of exactly one of the overlapping branches
                    for i, dfa in zip(undecided, only):
                        nodes[i] = ("dfa", dfa)
                    constant = [i for i in constant if i not in undecided]
            except GrammarError:
                narrowed = proofs.separated_branches(resolved)
                if narrowed is None:
                    raise
                self.inexact["oneOf"] += 1
                return alt(
                    *(
                        self.value(subs[i] if b is None else b, f"{path}/{key}/{i}")
                        for i, b in enumerate(narrowed)
                    )
                )
        parts = list(nodes.values())
        if constant:
            values = [v for i in constant for v in constant_values(subs[i], path)]
            parts.append(self.constants(values, path))
        return alt(*parts)

    def _exact_nodes(self, schemas: list, path: str) -> list:
        """Nodes of oneOf branches for the overlap check, which is sound only on nodes that
        admit every text their branch matches: built again, by a builder of their own, with
        properties in any order and digits unbounded; GrammarError where one still restricts."""
        any_ws, separators, strict, max_ws, _ = self.options
        exact = _Builder(self.root_schema, any_ws, separators, strict, max_ws, None)
        exact.property_order = "any"
        nodes = [exact.value(s, f"{path}/oneOf") for s in schemas]
        if exact.inexact:
            raise GrammarError(f"oneOf: branches that may overlap ({path})")
        return nodes

    def _one_of_proofs(self, path: str) -> OneOfProofs:
        return OneOfProofs(lambda s: self._deref(s, path), _regex_search, self.strict)

    def negation(self, schema: dict, path: str) -> tuple:
        """`not`: rewritten into a positive schema (negation.complement), else the base's
        automaton minus the negated one where both are regular and the negated one exact."""
        base = {k: v for k, v in schema.items() if k != "not"}
        negated = self._deref(schema["not"], path)
        if isinstance(negated, dict) and set(negated) - _ANNOTATIONS == {"type"}:
            excluded = _types_of(negated) or []
            if "number" in excluded:
                excluded = excluded + ["integer"]
            types = _types_of(base)  # [] where merged types left none
            if types is None:
                types = ["null", "boolean", "object", "array", "string", "number"]
            kept = [t for t in types if t not in excluded]
            if not kept:
                return NOTHING
            if "number" in kept and "integer" in excluded:  # numbers with a fraction
                rest = [t for t in kept if t != "number"]
                numbers = self.value({**base, "type": "number"}, path)
                if _has_rules(numbers):
                    raise GrammarError(f"not: excluding integers from numbers ({path})")
                fractions = intersect(numbers, FRACTIONAL)
                return (
                    alt(fractions, self.value({**base, "type": rest}, path)) if rest else fractions
                )
            return self.value({**base, "type": kept}, path)
        rewritten = complement(negated)
        if rewritten is None and isinstance(negated, dict) and base.get("type") is not None:
            # only values of the base's types matter: the negated side need not cover others
            negated = _merge(negated, {"type": base["type"]}, path)
            rewritten = complement(negated)
        positive = rewritten
        if rewritten is not None and _constrains(base):
            positive = {"allOf": [base, rewritten]}
        # constants are excluded from a regular base by difference, which needs no rewrite
        if positive is not None and not only_constants(negated):
            return self.value(positive, path)
        base_node = self.value(base, path)
        before = Counter(self.inexact)  # only the negated side must be exact
        negated_node = self.value(negated, path + "/not")
        regular = not (_has_rules(base_node) or _has_rules(negated_node) or self.inexact - before)
        if not regular and positive is not None:  # constants beside a non-regular base
            return self.value(positive, path)
        if not regular:
            raise GrammarError(
                f"not: only supported where both sides are non-recursive and exact ({path})"
            )
        if node_size(base_node, 5000, True) > 5000 or node_size(negated_node, 5000, True) > 5000:
            raise GrammarError(f"not: schema too large to negate ({path})")
        # the negated automaton is complete for canonical texts only (one spelling per value)
        return difference(intersect(base_node, canonical_texts()), negated_node)

    def _shared_node(self, node: tuple) -> tuple:
        """shared(node), one wrapper per node object (unbounded numbers are one constant)."""
        hit = self._wrappers.get(id(node))
        if hit is None or hit[1] is not node:
            hit = self._wrappers[id(node)] = (shared(node), node)
        return hit[0]

    def _deref(self, sub, path: str):
        while isinstance(sub, dict) and "$ref" in sub:
            target, _ = self.resolve(sub["$ref"])
            # before draft 2019-09, keywords beside $ref are ignored
            extra = {k: v for k, v in sub.items() if k != "$ref" and self.ref_siblings_apply}
            sub = _merge(target, extra, path) if extra else target
        return sub

    def _expand_alternatives(self, schema: dict, path: str) -> dict:
        """anyOf/oneOf lists collected while merging allOf, as one list of their combinations:
        the anyOf lists multiply into one anyOf, the oneOf lists into one oneOf (exactly one
        branch of each holds exactly when exactly one combination does), and with both, each
        anyOf combination holds a oneOf of the oneOf combinations merged into it."""
        if not isinstance(schema, dict):
            return schema
        groups = list(schema.pop("__alternatives", None) or [])
        if not groups:
            return schema
        for kind in ("anyOf", "oneOf"):
            if kind in schema:
                groups.append((kind, schema.pop(kind)))
        combos = {"anyOf": [{}], "oneOf": [{}]}
        for kind, branches in groups:
            if not isinstance(branches, list) or not branches:
                raise GrammarError(f"{kind} must be a non-empty list at {path}")
            combos[kind] = [
                _merge(c, self._deref(b, path), path) for c in combos[kind] for b in branches
            ]
            if len(combos["anyOf"]) * len(combos["oneOf"]) > 64:
                raise GrammarError(f"allOf: too many combinations of anyOf/oneOf ({path})")
        out = dict(schema)
        kinds = {kind for kind, _ in groups}
        if kinds == {"anyOf", "oneOf"}:
            one_of = combos["oneOf"]
            out["anyOf"] = [
                {"oneOf": [_merge(a, o, path) for o in one_of]} for a in combos["anyOf"]
            ]
        else:
            (kind,) = kinds
            out[kind] = combos[kind]
        return out

    def constants(self, values: list, path: str) -> tuple:
        return constants_node(values, self.literal, path, self.draft == "draft-04")

    def literal(self, value, path: str) -> tuple:
        if value is None:
            return lit("null")
        if isinstance(value, (bool, int, float)):
            return _number_literal(value, self.draft == "draft-04")
        if isinstance(value, str):
            return _string_literal(value)
        if isinstance(value, list):
            return self.written_in_order("[", [self.literal(v, path) for v in value], "]")
        if isinstance(value, dict):
            return self.object_literal(value, path)
        raise GrammarError(f"const/enum value of unsupported type at {path}")

    def typed(self, t: str, schema: dict, path: str) -> tuple:
        if t == "null":
            return lit("null")
        if t == "boolean":
            return alt(lit("true"), lit("false"))
        if t in ("integer", "number"):
            if self.max_digits is not None:  # digit runs cut at a length the value may exceed
                self.inexact["digits"] += 1
            return self._shared_node(number_node(schema, t == "integer", path, self.max_digits))
        if t == "string":
            if schema.get("format") in RESTRICTED_FORMATS:
                self.inexact["format"] += 1
            return string_node(schema, path, self.rules)
        if t == "array":
            return self.array_node(schema, path)
        if t == "object":
            return self.object_node(schema, path)
        raise GrammarError(f"type: unknown type {t!r} at {path}")
