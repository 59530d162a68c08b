"""uniqueItems over arrays of free strings, checked by the matcher (grammars/unique_items.py).

Which arrays hold distinct values is not a regular property once the items are unbounded, so
the automaton cannot check it. For an array whose items are strings limited at most by
minLength (every prefix of an item still has infinitely many completions, so refusing a
duplicate never leaves the matcher without a way on), the automaton accepts the array without
the condition and the matcher refuses a token that completes an item equal (as a JSON value)
to an earlier item of the same array.

The matcher finds those arrays in the document by following the schema along the document's
keys and item positions (a `Place`), so every keyword on the way must apply whatever the
document holds: properties, additionalProperties (without patternProperties beside it),
items / prefixItems / additionalItems, allOf and $ref. An array schema met anywhere under a
keyword that applies only sometimes (anyOf, oneOf, not, if/then/else, dependentSchemas,
patternProperties, contains, ...) is not tracked and keeps raising GrammarError."""

from __future__ import annotations

from grammars.errors import GrammarError
from grammars.json_schema.core import _ANNOTATIONS, _types_of, array_parts, resolve_ref

_OPEN_STRING = {"type", "minLength"}
_BRANCH_KEYS = {"type", "properties", "required", "additionalProperties"}  # see _by_const
_OBJECT_KEYWORDS = ("properties", "additionalProperties", "patternProperties", "required")
_SCHEMA_MAPS = ("$defs", "definitions")  # reached only through $ref
_MAX_PLACE_KEYS = 4096  # additionalProperties lookups kept per place


def _annotation(key: str) -> bool:
    return key in _ANNOTATIONS or key.startswith("x-")


class UniquePlan:
    """The array schemas (by identity) whose uniqueItems the matcher checks, and the places of
    the document below the root schema. Picklable (plain dicts), shared by every matcher."""

    def __init__(self, root, ref_siblings: bool, property_order: str = "schema"):
        self._root = root
        self._ref_siblings = ref_siblings
        self._property_order = property_order
        self.tracked: set[int] = set()
        self._relevant: set[int] = set()  # schemas below which a tracked array may be placed
        self._find(root)
        self.root = Place(self, self._expanded([root])) if self.tracked else None

    # the sets hold ids, which a copy made by pickle does not keep: it keeps the schemas
    def __getstate__(self):
        state = dict(self.__dict__)
        ids = {id(s): s for s in _schemas(self._root)}
        state["tracked"] = [ids[i] for i in self.tracked]
        state["_relevant"] = [ids[i] for i in self._relevant]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.tracked = {id(s) for s in state["tracked"]}
        self._relevant = {id(s) for s in state["_relevant"]}

    # -- planning ---------------------------------------------------------------------------
    def _find(self, root) -> None:
        candidates: set[int] = set()
        tainted: set[int] = set()
        parents: dict[int, set[int]] = {}  # child id -> ids of the schemas placing it always
        seen: set[tuple[int, bool]] = set()
        todo = [(root, True, None)]
        while todo:
            node, always, parent = todo.pop()
            if isinstance(node, list):
                todo.extend((x, always, parent) for x in node)
                continue
            if not isinstance(node, dict):
                continue
            if always and parent is not None:
                parents.setdefault(id(node), set()).add(parent)
            if (id(node), always) in seen:
                continue
            seen.add((id(node), always))
            if not always:
                tainted.add(id(node))
            elif self._free_string_items(node):
                candidates.add(id(node))
            todo.extend(self._children(node, always))
        self.tracked = candidates - tainted
        # every schema from which a tracked one is placed, through the always-applying keywords
        todo = list(self.tracked)
        while todo:
            i = todo.pop()
            if i not in self._relevant:
                self._relevant.add(i)
                todo.extend(parents.get(i, ()))

    def _children(self, node: dict, always: bool):
        """(child, always, id(node)) for every schema under `node`: `always` where it applies
        to a fixed place whatever the document holds."""
        here = id(node)
        ref = node.get("$ref")
        siblings = ref is None or self._ref_siblings
        if isinstance(ref, str):
            target = self._target(ref)
            if target is not None:
                yield target, always, here
        for key, value in node.items():
            if key in _SCHEMA_MAPS or key == "$ref" or not isinstance(value, dict | list):
                continue
            keep = always and siblings and self._places_always(node, key, value)
            if key == "properties" and isinstance(value, dict):
                yield from ((v, keep, here) for v in value.values())
            else:  # anything else: every schema (or value taken for one) below it, sometimes
                yield value, keep, here

    def _places_always(self, node: dict, key: str, value) -> bool:
        """Whether `node`'s keyword `key` puts its schemas at places the document alone fixes
        (whatever else it holds)."""
        if key in ("properties", "allOf", "items", "prefixItems"):
            return True
        if key == "additionalProperties":
            return "patternProperties" not in node
        if key == "additionalItems":
            return isinstance(node.get("items"), list)
        if key in ("anyOf", "oneOf"):
            return self._by_type(value) is not None or self._by_const(node, key) is not None
        return False

    def _target(self, ref: str):
        try:
            target = resolve_ref(self._root, ref)[0]
        except GrammarError:  # the builder reports a bad reference itself
            return None
        return target if isinstance(target, dict | list) else None

    def _plain(self, node):
        """`node` through a chain of references with nothing but annotations beside them."""
        for _ in range(64):
            if not isinstance(node, dict) or "$ref" not in node:
                return node
            if any(not _annotation(k) for k in node if k != "$ref"):
                return None
            ref = node["$ref"]
            node = self._target(ref) if isinstance(ref, str) else None
        return None

    def _by_type(self, branches) -> list | None:
        """For anyOf / oneOf branches that each declare types no other branch has (integer and
        number counted as one): each branch with its set of JSON types (so a value's type
        picks the one branch that can hold); None otherwise."""
        if not isinstance(branches, list):
            return None
        out, taken = [], set()
        for b in branches:
            plain = self._plain(b)
            types = _types_of(plain) if isinstance(plain, dict) else None
            if not types or not all(isinstance(t, str) for t in types):
                return None
            kinds = {"number" if t == "integer" else t for t in types}
            if kinds & taken:
                return None
            taken |= kinds
            out.append((b, kinds))
        return out

    def _by_const(self, node: dict, key: str) -> tuple | None:
        """For `node`'s anyOf / oneOf of objects told apart by the constant of their first
        property (a tool call's {"name": {"const": ...}, "arguments": ...}): (that property,
        {its value: branch}); None otherwise. In schema order, with nothing beside the branches
        but `type`, that required first property is the document's first key, so the branch
        is known before any other key is read."""
        if self._property_order != "schema" or node.get("type", "object") != "object":
            return None
        if any(not _annotation(k) and k not in ("type", key) for k in node):
            return None
        branches = node.get(key)
        if not isinstance(branches, list) or len(branches) < 2:
            return None
        name, out = None, {}
        for b in branches:
            plain = self._plain(b)
            if not isinstance(plain, dict) or plain.get("type") != "object":
                return None
            if any(not _annotation(k) and k not in _BRANCH_KEYS for k in plain):
                return None
            props, required = plain.get("properties"), plain.get("required")
            if not isinstance(props, dict) or not props or not isinstance(required, list):
                return None
            first = next(iter(props))
            name = first if name is None else name
            const = props[first]
            if first != name or name not in required or not isinstance(const, dict):
                return None
            if any(not _annotation(k) and k not in ("const", "type") for k in const):
                return None
            value = const.get("const")
            if not isinstance(value, str) or value in out:
                return None
            out[value] = b
        return name, out

    def _free_string_items(self, node: dict) -> bool:
        """An array schema with uniqueItems whose items are strings limited at most by
        minLength (and no other condition on the array that could leave no way on)."""
        if node.get("uniqueItems") is not True or "contains" in node:
            return False
        hi = node.get("maxItems")
        if isinstance(hi, int) and not isinstance(hi, bool) and hi <= 1:
            return False  # one item is always unique: the automaton needs no help
        try:
            prefix, items = array_parts(node, "")
        except GrammarError:  # malformed: the builder reports it
            return False
        if prefix:
            return False
        items = self._plain(items)
        if not isinstance(items, dict):
            return False
        if any(not _annotation(k) and k not in _OPEN_STRING for k in items):
            return False
        lo = items.get("minLength", 0)
        return _types_of(items) == ["string"] and isinstance(lo, int) and not isinstance(lo, bool)

    # -- places -----------------------------------------------------------------------------
    def _expanded(self, schemas) -> tuple:
        """The schemas applying at one place: each with those its $ref and allOf add."""
        out, seen = [], set()
        todo = list(reversed(schemas))
        while todo:
            s = todo.pop()
            if not isinstance(s, dict) or id(s) in seen:
                continue
            seen.add(id(s))
            ref = s.get("$ref")
            if isinstance(ref, str):
                todo.append(self._target(ref))
                if not self._ref_siblings:
                    continue
            out.append(s)
            parts = s.get("allOf")
            if isinstance(parts, list):
                todo.extend(reversed(parts))
        return tuple(out)

    def place(self, schemas: list):
        """The Place of `schemas` (None where no tracked array can be below)."""
        if not schemas:
            return None
        expanded = self._expanded(schemas)
        if not any(id(s) in self._relevant for s in expanded):
            return None
        return Place(self, expanded)


def _schemas(root):
    """Every dict under `root` (each once)."""
    seen, todo = {}, [root]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            if id(x) not in seen:
                seen[id(x)] = x
                todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return seen.values()


class Place:
    """Where the document is, as the schemas that apply there: `unique` when an array here
    must hold distinct items (checked by the matcher); key() and item() give the places below
    (None: no tracked array below)."""

    __slots__ = ("plan", "schemas", "unique", "choice", "_keys", "_items", "_typed", "_chosen")

    def __init__(self, plan: UniquePlan, schemas: tuple, choice: tuple | None = None):
        self.plan = plan
        self.schemas = schemas
        self.unique = any(id(s) in plan.tracked for s in schemas)
        self.choice = choice  # (key, {value: branch}) where a key's value picks a branch
        self._keys: dict[str, Place | None] = {}
        self._items: dict[int, Place | None] = {}
        self._typed: dict[str, Place] = {}
        self._chosen: dict[str, Place] = {}

    def chosen(self, value: str) -> Place:
        """This object's place once its `choice` key holds `value`."""
        hit = self._chosen.get(value)
        if hit is None:
            branch = self.choice[1].get(value)
            more = self.plan._expanded([branch]) if branch is not None else ()
            hit = self._chosen[value] = Place(self.plan, self.schemas + more)
        return hit

    def typed(self, kind: str) -> Place:
        """This place once its value is known to be of JSON type `kind` ("object" or "array"):
        with the anyOf / oneOf branches that type picks (see UniquePlan._by_type), and for an
        object the choice its first key's constant makes (UniquePlan._by_const)."""
        hit = self._typed.get(kind)
        if hit is None:
            schemas, done, choices, pickers = list(self.schemas), set(), [], set()
            grew = True
            while grew:
                grew = False
                for s in list(schemas):
                    for key in ("anyOf", "oneOf"):
                        if (id(s), key) in done or key not in s:
                            continue
                        done.add((id(s), key))
                        by_const = kind == "object" and self.plan._by_const(s, key)
                        if by_const:
                            choices.append(by_const)
                            pickers.add(id(s))
                        for branch, kinds in self.plan._by_type(s[key]) or ():
                            if kind in kinds:
                                schemas.extend(self.plan._expanded([branch]))
                                grew = True
            keyed = any(  # another schema here naming keys: those may come before the choice
                k in x for x in schemas if id(x) not in pickers for k in _OBJECT_KEYWORDS
            )
            if len(choices) > 1 or (choices and keyed):  # (allOf of such groups, or beside
                # properties): every branch applies, so a check any of them asks for is made
                # (sound; it may refuse a document whose chosen branch would allow a repeat)
                for _, branches in choices:
                    schemas.extend(self.plan._expanded(list(branches.values())))
                choices = []
            choice = choices[0] if choices else None
            hit = self._typed[kind] = Place(self.plan, self.plan._expanded(schemas), choice)
        return hit

    def key(self, name: str):
        """The place of the value under key `name`."""
        hit = self._keys.get(name, False)
        if hit is False:
            below = []
            for s in self.schemas:
                props = s.get("properties")
                if isinstance(props, dict) and name in props:
                    below.append(props[name])
                elif "patternProperties" not in s and isinstance(
                    s.get("additionalProperties"), dict
                ):
                    below.append(s["additionalProperties"])
            hit = _kept(self._keys, name, self.plan.place(below))
        return hit

    def item(self, index: int):
        """The place of the item at `index`."""
        hit = self._items.get(index, False)
        if hit is False:
            below = []
            for s in self.schemas:
                try:
                    prefix, rest = array_parts(s, "")
                except GrammarError:  # malformed: the builder reported it
                    continue
                sub = prefix[index] if index < len(prefix) else rest
                if isinstance(sub, dict):
                    below.append(sub)
            hit = _kept(self._items, index, self.plan.place(below))
        return hit


def _kept(memo: dict, at, place):
    """`place`, kept in `memo` under `at` while the memo is small (keys of additionalProperties
    and item indices are the document's to choose)."""
    if len(memo) < _MAX_PLACE_KEYS:
        memo[at] = place
    return place
