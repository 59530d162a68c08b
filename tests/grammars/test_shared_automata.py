"""Automata built for compile speed must match exactly what the plain constructions match:
length counters laid out as arrays, fragments built once and copied, patterns left to the lazy
DFA, keys that exclude the named properties."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars import fragments
from grammars.array_dfa import ArrayDFA, LazyDFA, mask_bytes
from grammars.automaton import NFA, NOTHING, EagerDFA, StateIndex, alt, byte_classes, cat, lit, rep
from grammars.fragments import keep
from grammars.json_schema.core import node_size, shared
from grammars.json_schema.counted import _STRING_CHAR, _length_dfa
from grammars.json_schema.strings import _lazy_pattern, key_except, key_node
from grammars.lazydfa_arrays import nfa_graph
from grammars.regex import regex_to_node


def names_node(names) -> tuple:
    """The names as quoted JSON keys (nothing when there are none)."""
    return alt(*(lit(f'"{n}"') for n in names)) if names else NOTHING


def same_language(a: EagerDFA, b: EagerDFA) -> bool:
    return a.product(b, "diff").is_empty() and b.product(a, "diff").is_empty()


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (1, 1), (0, None), (3, None), (2, 5), (4, 4)])
def test_length_counter_matches_the_unrolled_repetition(lo, hi):
    counter = _length_dfa(lo, hi)
    assert isinstance(counter, ArrayDFA)
    reference = EagerDFA.from_node(rep(_STRING_CHAR, lo, hi))
    assert same_language(counter, reference)


def test_length_counter_counts_characters_not_bytes():
    counter = _length_dfa(2, 3)
    assert counter.accepts(b"ab")
    assert counter.accepts("é日x".encode())  # three characters, six bytes
    assert counter.accepts(b"\\u00e9\\n")  # two escaped characters
    assert not counter.accepts(b"a")
    assert not counter.accepts(b"abcd")
    assert not counter.accepts(b"ab\\")  # an escape cut short is no character


def test_fragment_uses_match_the_node_built_at_each_use():
    body = alt(cat(lit("ab"), rep(lit("c"), 0, None)), cat(lit("x"), rep(lit("yz"), 1, 3)))
    wrapped = shared(body)
    assert wrapped[0] == "frag"
    nested = shared(cat(lit("<"), wrapped, lit(">"), wrapped))
    node = cat(wrapped, lit(","), nested, lit(","), nested, rep(cat(lit(";"), wrapped), 0, 2))
    pair = cat(lit("<"), body, lit(">"), body)
    plain = cat(body, lit(","), pair, lit(","), pair, rep(cat(lit(";"), body), 0, 2))
    assert same_language(EagerDFA.from_node(node), EagerDFA.from_node(plain))


def _moves_by_state(graph) -> tuple:
    """Each state's moves from an NFAGraph, as sets."""
    n = len(graph.eps_ptr) - 1
    eps = [set(graph.eps_idx[graph.eps_ptr[s] : graph.eps_ptr[s + 1]].tolist()) for s in range(n)]
    edges = [set() for _ in range(n)]
    for s in range(n):
        for j in range(graph.e_ptr[s], graph.e_ptr[s + 1]):
            b, m = int(graph.e_byte[j]), int(graph.e_mask[j])
            mask = 1 << b if b >= 0 else sum(int(w) << 64 * i for i, w in enumerate(graph.masks[m]))
            edges[s].add((mask, int(graph.e_tgt[j])))
    nts = [set() for _ in range(n)]
    for s in range(n):
        for j in range(graph.nt_ptr[s], graph.nt_ptr[s + 1]):
            nts[s].add((int(graph.nt_rule[j]), int(graph.nt_tgt[j])))
    return eps, edges, nts


def test_laid_out_graph_holds_every_move_of_uses_and_copies():
    """nfa_graph's compiled layout of fragment uses (nested ones too) and DFA copies has the
    same moves per state as the NFA's own expansion of them into tuples."""
    body = alt(cat(lit("ab"), rep(lit("c"), 0, None)), cat(lit("x"), ("nt", "r"), lit("z")))
    wrapped = shared(cat(body, body))
    digits = ("dfa", EagerDFA.from_node(rep(alt(lit("0"), lit("17")), 1, 3)))
    nested = shared(cat(lit("<"), wrapped, digits, lit(">"), wrapped))
    node = cat(wrapped, digits, nested, rep(cat(lit(";"), nested, digits), 0, 2))

    def built():
        nfa = NFA()
        s, e = nfa.new(), nfa.new()
        nfa.build(node, s, e)
        r_s, r_e = nfa.new(), nfa.new()
        nfa.build(lit("q"), r_s, r_e)
        return nfa

    nfa = built()
    assert nfa.frag_uses and nfa.copies
    eps, edges, nts = _moves_by_state(nfa_graph(nfa, {"r": 0}))
    plain = built()
    plain._expand_copies()
    assert not plain.frag_uses and not plain.copies and plain.size == nfa.size
    moves = [plain.eps[i::2] for i in range(2)], [plain.edges[i::3] for i in range(3)]
    rule_moves = [plain.nts[i::3] for i in range(3)]
    for s in range(plain.size):
        assert eps[s] == {b for a, b in zip(*moves[0]) if a == s}
        assert edges[s] == {(m, b) for a, m, b in zip(*moves[1]) if a == s}
        assert nts[s] == {(0, b) for a, _, b in zip(*rule_moves) if a == s}


def test_small_nodes_are_not_wrapped():
    assert shared(lit("a")) == lit("a")
    assert shared(cat(lit("ab"))) == lit("ab")


def test_shared_definitions_compile_to_the_same_documents(checker):
    point = {
        "type": "object",
        "properties": {"x": {"type": "integer", "minimum": 0}, "y": {"type": "number"}},
        "required": ["x"],
        "additionalProperties": False,
    }
    schema = {
        "$defs": {"point": point},
        "type": "object",
        "properties": {k: {"$ref": "#/$defs/point"} for k in ("a", "b", "c")}
        | {"tags": {"type": "array", "items": {"$ref": "#/$defs/point"}}, "any": {}},
        "required": ["a", "c"],
    }
    valid = [
        {"a": {"x": 1}, "c": {"x": 0, "y": 2.5}},
        {"a": {"x": 1, "y": -1}, "b": {"x": 2}, "c": {"x": 3}, "tags": [{"x": 4}, {"x": 5}]},
        {"a": {"x": 1}, "c": {"x": 2}, "any": [{"k": None}, "s", 1.5]},
    ]
    invalid = [
        {"a": {"x": 1}},
        {"a": {"x": -1}, "c": {"x": 0}},
        {"a": {"x": 1}, "b": {"y": 1}, "c": {"x": 0}},
        {"a": {"x": 1}, "c": {"x": 0, "z": 1}},
        {"a": {"x": 1}, "c": {"x": 0}, "tags": [{"x": 1}, {"x": "2"}]},
    ]
    checker.check_schema("shared $defs", schema, valid, invalid)


@pytest.mark.parametrize(
    "pattern, valid, invalid",
    [
        ("^dev|alpha|beta|rc|RC|stable$", ["dev1", "x-alpha", "RC", "is stable"], ["de", "v"]),
        (r"^\w{4}\s{1}\d{3}$", ["COMP 101", "ab_c 000"], ["COMP101", "COMP 1011", "é"]),
        ("[0-9]", ["a1", "9"], ["", "abc"]),
    ],
)
def test_patterns_left_to_the_lazy_dfa(checker, pattern, valid, invalid):
    lazy = _lazy_pattern(pattern)
    assert isinstance(lazy, LazyDFA)
    checker.check_schema(
        f"pattern {pattern}", {"type": "string", "pattern": pattern}, valid, invalid
    )
    eager = EagerDFA.from_node(regex_to_node(pattern, json_mode=True, search=True))
    assert same_language(lazy, eager)
    assert node_size(("dfa", lazy), None, exact=True) == eager.n_states


@pytest.mark.parametrize(
    "names",
    [(), ("",), ("a", "ab", "abc"), ("name", "type", "x y", "~!"), ("ab", "ac", "b", "abd")],
)
def test_keys_except_names_refuse_exactly_the_names(names):
    keys = key_except(names)
    # the language of every key less the names' spellings (read through the list of masks,
    # made from the packed rows the NFA reads), each mask once and every one used, numbered
    # from 0; the list is made only when asked for
    fresh = key_except.__wrapped__(names)  # (the cached one may have been asked already)
    fresh.move_arrays(), mask_bytes(fresh)
    assert fresh._moves[3] is None
    every_key = key_node()[1]
    assert same_language(keys, every_key.product(EagerDFA.from_node(names_node(names)), "diff"))
    _, ids, _, masks, accepting = keys.moves()
    assert np.array_equal(accepting, np.flatnonzero(keys.accept))
    assert sorted(set(ids.tolist())) == list(range(len(masks)))
    assert len(set(masks)) == len(masks)
    for name in names:
        assert not keys.accepts(f'"{name}"'.encode())
    for other in ("zz", "a b", "nam", "names", "typ", "é", "\\n"):
        if other not in names:
            assert keys.accepts(f'"{other}"'.encode()), other
    assert not keys.accepts(b'"a')


@pytest.mark.parametrize(
    "names", [('a"b',), ("a", '"'), ('"', ""), ("a\\b",), ("é",), ("a", "\n"), ("tab\t",)]
)
def test_keys_except_names_not_plain_ascii_are_left_to_the_general_construction(names):
    # (the quote joins the names for the trie's kernel: a name holding one must not split)
    assert key_except(names) is None


# printable ASCII but the quote and the backslash (what key_except takes); few letters make
# names that share prefixes, so trie nodes with several children and their narrowed moves
_NAME_CHARS = st.sampled_from("ab~ ") | st.characters(
    min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"\\'
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(_NAME_CHARS, max_size=5), max_size=8, unique=True))
def test_keys_except_any_names_refuse_exactly_the_names(names):
    keys = key_except(tuple(names))
    every_key = key_node()[1]
    assert same_language(keys, every_key.product(EagerDFA.from_node(names_node(names)), "diff"))
    _, ids, _, masks, _ = keys.moves()
    assert sorted(set(ids.tolist())) == list(range(len(masks)))
    assert len(set(masks)) == len(masks)


def test_extra_properties_never_take_a_named_key(checker):
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "ab": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    checker.check_schema(
        "additionalProperties beside named ones",
        schema,
        [{"a": "x", "abc": 1}, {"ab": "y", "b": 2}, {"a": "x", "ab": "y"}],
        [{"a": 1}, {"ab": 1}, {"abc": "s"}],
    )


def _kept_parts():
    """A kept fragment holding an inner fragment, DFA copies, a counted repetition (reps) and
    a rule reference; the inner fragment alone; the same node without any wrapper."""
    inner_body = alt(cat(lit("ab"), rep(lit("c"), 0, None)), cat(lit("x"), rep(lit("yz"), 1, 3)))
    inner = shared(inner_body)
    digits = ("dfa", EagerDFA.from_node(rep(alt(lit("0"), lit("17")), 1, 3)))
    body = cat(lit("["), inner, digits, rep(lit("k"), 0, 9), lit("|"), inner, ("nt", "r"), lit("]"))
    plain = cat(lit("["), inner_body, digits, rep(lit("k"), 0, 9), lit("|"), inner_body)
    plain = cat(plain, ("nt", "r"), lit("]"))
    return keep(shared(body)), inner, plain, inner_body


def _rule_nfa(node):
    """An NFA of `node` (rule 0) and of rule r: "q", between the states returned."""
    nfa = NFA()
    s, e = nfa.new(), nfa.new()
    nfa.build(node, s, e)
    r_s, r_e = nfa.new(), nfa.new()
    nfa.build(lit("q"), r_s, r_e)
    return nfa, s, e, r_s, r_e


def _nfa_language(nfa, s, e, r_s, r_e) -> EagerDFA:
    """The texts of rule 0 of a _rule_nfa, its references to r read as "q" (r nests nothing)."""
    nfa._expand_copies()
    for i in range(0, len(nfa.nts), 3):
        a, _, b = nfa.nts[i : i + 3]
        nfa.eps += (a, r_s, r_e, b)
    nfa.nts = []
    dfa = EagerDFA()
    states = StateIndex(dfa, 20_000, "too large")
    start = nfa.closure([s])
    dfa.start = states(start, e in start)
    while states.todo:
        S = states.todo.pop()
        edges = [edge for n in S for edge in nfa.edges_of(n)]
        for mask, targets in byte_classes(edges):
            T = nfa.closure(targets)
            dfa.trans[states.index[S]].append((mask, states(T, e in T)))
    return dfa.trimmed()


def test_kept_fragments_replay_their_first_build(monkeypatch):
    """A kept fragment's first build is recorded (with the fragments inside it built afresh
    even where the NFA had built them before), later NFAs replay it: the replayed NFA reads the
    same texts as the node built plainly, and its laid-out graph has every move its own
    expansion has (the replay's copies, uses, inner fragments and repetitions are consistent)."""
    monkeypatch.setattr(fragments, "_KEPT", {})
    kept, inner, plain, inner_body = _kept_parts()
    replays = []
    replay = fragments.Recording.replay
    monkeypatch.setattr(fragments.Recording, "replay", lambda *a: replays.append(1) or replay(*a))
    first = cat(inner, lit(";"), kept)  # the inner fragment built before the recording
    later = cat(lit("<"), kept, lit(">"), kept, lit("!"), inner)  # replay, use, inner use
    reference = cat(lit("<"), plain, lit(">"), plain, lit("!"), inner_body)
    _rule_nfa(first)
    assert fragments._KEPT[id(kept)][1] is not None and not replays
    nfa, *ends = _rule_nfa(later)
    assert len(replays) == 1 and nfa.reps and nfa.copies and nfa.frag_uses
    eps, edges, nts = _moves_by_state(nfa_graph(nfa, {"r": 0}))
    plain_nfa, *_ = _rule_nfa(later)
    plain_nfa._expand_copies()
    for s in range(plain_nfa.size):
        assert eps[s] == {b for a, b in zip(plain_nfa.eps[::2], plain_nfa.eps[1::2]) if a == s}
        moves = zip(plain_nfa.edges[::3], plain_nfa.edges[1::3], plain_nfa.edges[2::3])
        assert edges[s] == {(m, b) for a, m, b in moves if a == s}
    replayed = _nfa_language(_rule_nfa(later)[0], *ends)
    assert same_language(replayed, _nfa_language(*_rule_nfa(reference)))


def test_replayed_any_value_gives_the_masks_of_a_plain_build(checker, monkeypatch):
    """Schemas whose extra properties take any value, compiled with the any-value node replayed
    from an earlier compile and compiled with nothing kept: the same documents, the same masks."""
    import grammars.json_schema.builder as builder
    from grammars import GrammarCompiler

    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {}}}
    docs = [{"a": "x", "b": [1, {"c": None}], "z": {"y": [True, "w"]}}, {"b": 2.5e3}, {"a": 1}]
    docs += ['{"a": "x", "q": [1, 2}', '{"z": {"y": [}]}']
    compiler = GrammarCompiler(checker.tok, cache_size=0)
    compiler.compile_json_schema({"items": {"type": "integer"}})  # records the any-value node
    replays = []
    replay = fragments.Recording.replay
    monkeypatch.setattr(fragments.Recording, "replay", lambda *a: replays.append(1) or replay(*a))
    replayed = compiler.compile_json_schema(schema)
    assert replays
    monkeypatch.setattr(builder, "keep", lambda wrapper: wrapper)
    monkeypatch.setattr(fragments, "_KEPT", {})  # (any_body's wrapper is cached: kept by id)
    replays.clear()
    plain = compiler.compile_json_schema(schema)
    assert not replays
    for doc in docs:
        text = doc if isinstance(doc, str) else json.dumps(doc)
        assert checker.accepts(replayed, text) == checker.accepts(plain, text), text
        ids = checker.tok.encode(text, add_special_tokens=False)
        a, b = replayed.matcher(), plain.matcher()
        for t in ids:
            assert (a.next_token_mask() == b.next_token_mask()).all(), text
            if not (a.accept_token(t) and b.accept_token(t)):
                break


def test_kept_fragments_inside_kept_fragments(monkeypatch):
    """A kept fragment replayed inside the first build of another (whose recording then holds
    the replay's fragments) and both replayed later: the texts of the plain node."""
    monkeypatch.setattr(fragments, "_KEPT", {})
    kept_inner, inner, plain_inner, inner_body = _kept_parts()
    outer_body = cat(lit("("), kept_inner, lit(","), inner, lit(","), kept_inner, lit(")"))
    outer = keep(shared(outer_body))
    plain_outer = cat(lit("("), plain_inner, lit(","), inner_body, lit(","), plain_inner, lit(")"))
    _rule_nfa(kept_inner)  # recorded
    _rule_nfa(outer)  # recorded, with kept_inner replayed inside
    assert fragments._KEPT[id(outer)][1] is not None
    node = cat(outer, lit("/"), kept_inner, lit("/"), outer)
    reference = cat(plain_outer, lit("/"), plain_inner, lit("/"), plain_outer)
    assert same_language(_nfa_language(*_rule_nfa(node)), _nfa_language(*_rule_nfa(reference)))
