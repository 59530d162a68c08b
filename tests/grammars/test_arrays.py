"""The helpers under the grammar engine's arrays: growth, bit setting and mask rows."""

import numpy as np
import pytest

from grammars import grammar, lazydfa, lazydfa_arrays, lazydfa_chain, lazydfa_walk
from grammars.grammar import Machine
from grammars.lazydfa_arrays import enlarged
from grammars.regex import regex_to_node


def test_enlarged_keeps_the_rows_and_fills_the_new_ones():
    table = np.arange(12, dtype=np.int32).reshape(3, 4)
    grown = enlarged(table, 8)
    assert grown.shape == (8, 4) and grown.dtype == np.int32
    assert (grown[:3] == table).all() and (grown[3:] == 0).all()
    counts = np.array([5, 6], np.int64)
    grown = enlarged(counts, 5, -1)
    assert grown.tolist() == [5, 6, -1, -1, -1]
    assert enlarged(counts, 2) is counts  # large enough: the array itself


def test_set_bits_matches_a_plain_reading():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 3000, 500).astype(np.int64)  # repeats, and many in one word
    tokens = np.concatenate([tokens, [0, 31, 32, 2999, 2999]])
    words = np.zeros(94, np.uint32)
    words[3] = 0x80000001  # bits already set stay set
    lazydfa_walk.set_bits(words, tokens)
    expected = np.zeros(94 * 32, bool)
    expected[tokens] = True
    expected[3 * 32] = expected[3 * 32 + 31] = True
    got = np.unpackbits(words.view(np.uint8), bitorder="little").astype(bool)
    assert (got == expected).all()


def test_mask_rows_are_zero_whatever_the_block_held():
    blocks = grammar._RowBlocks(50)
    first = blocks.new()
    assert first.shape == (50,) and not first.any()
    first[:] = 7
    blocks.rest[:] = 0xFFFFFFFF  # what an uninitialised block may hold
    for _ in range(grammar._FIRST_ROWS + grammar._ROW_BLOCK):  # through a second block
        row = blocks.new()
        assert not row.any()
        row[:] = 0xFFFFFFFF
    assert (first == 7).all()  # rows handed out are not handed out again


def _chain(machine, mask_bytes: bytes, memo) -> list[int]:
    """The chain of the root's start state over the bytes of `mask_bytes`
    (lazydfa_chain.extend_chain)."""
    in_chain = np.zeros(256, np.bool_)
    in_chain[list(mask_bytes)] = True
    chain = np.zeros(9, np.int64)
    chain[0], chain[1] = 1, machine.rule_start[machine.root]
    ends = np.zeros(1, np.bool_)
    assert machine._run(lazydfa_chain.extend_chain, chain, ends, in_chain, False, 8, memo) == 0
    return chain[1 : chain[0] + 1].tolist()


def test_chain_memo_keeps_each_mask_apart():
    machine = Machine({"root": regex_to_node("[a-z]{0,5}")}, "root")
    memo = np.zeros((machine.dfa.table.shape[0], 5), np.int64)
    letters = bytes(range(ord("a"), ord("z") + 1))
    counter = _chain(machine, letters, memo)
    assert len(counter) == 6  # the start and five letters
    assert _chain(machine, letters, memo) == counter  # from the memo
    # a byte the states send elsewhere ends the chain at once, whatever the memo holds
    assert _chain(machine, letters + b"A", memo) == counter[:1]
    assert _chain(machine, b"abc", memo) == counter  # a smaller mask sent the same way
    fresh = np.zeros_like(memo)
    assert _chain(machine, letters + b"A", fresh) == counter[:1]


def test_rows_of_grown_tables_are_written_whole_before_use(monkeypatch):
    """grown() leaves the new rows of every per-state array uninitialised (poisoned under the
    test suite): every state built after the growth must still hold exactly its moves and the
    first bytes of the rules it pushes (a small first capacity: two growths)."""
    from grammars.json_schema import schema_to_rules

    monkeypatch.setattr(lazydfa_arrays, "_FIRST_CAPACITY", 512)

    schema = {
        "type": "object",
        "properties": {f"k{i}": {"type": "array", "items": {"$ref": "#"}} for i in range(40)},
    }
    rules, root = schema_to_rules(schema)
    machine = Machine(rules, root)
    capacity = machine.dfa.table.shape[0]
    todo, seen = [int(s) for s in machine.rule_start], set()
    while todo:  # every state, built through materialize
        g = todo.pop()
        if g in seen:
            continue
        seen.add(g)
        machine.live(g)
        todo.extend(int(t) for t in np.unique(machine.dfa.table[g]) if t)
        start, count = machine.dfa.push_start[g], machine.dfa.push_count[g]
        todo.extend(int(t) for t in machine.dfa.push_ret[start : start + count])
    dfa, first = machine.dfa, machine.arrays.first
    n = int(dfa.meta[lazydfa._STATES])
    assert n > 2 * capacity and dfa.table.shape[0] > capacity  # built past a growth
    for g in seen:
        row = dfa.table[g]
        assert ((row >= 0) & (row < n)).all()
        start, count = dfa.push_start[g], dfa.push_count[g]
        rules_pushed = dfa.push_rule[start : start + count]
        want = first[rules_pushed].any(axis=0) if count else np.zeros(256, bool)
        assert (dfa.viable[g] == want).all(), g
        members = dfa.mem[dfa.m_ptr[g] : dfa.m_ptr[g + 1]]
        assert dfa.done[g] and dfa.accept[g] == machine.arrays.final[members].any(), g


def test_kernels_work_on_the_arrays_python_reads_through_growth_and_pickling(monkeypatch):
    """The kernels take boxes of the arrays (grammars/boxes.py): what they write is what the
    named tuples show, a growth gives the kernels a box of the new arrays, and a machine sent
    to another process (pickled, as the compile process does) gets boxes of its own."""
    import pickle

    from grammars.json_schema import schema_to_rules

    monkeypatch.setattr(lazydfa_arrays, "_FIRST_CAPACITY", 512)
    rules, root = schema_to_rules(
        {"type": "object", "properties": {f"k{i}": {"$ref": "#"} for i in range(30)}}
    )

    def build_all(machine):
        todo, seen = [int(s) for s in machine.rule_start], set()
        while todo:
            g = todo.pop()
            if g not in seen:
                seen.add(g)
                machine.live(g)  # materialize, called with the boxes
                todo.extend(int(t) for t in np.unique(machine.dfa.table[g]) if t)
        return seen

    machine = Machine(rules, root)
    copy = pickle.loads(pickle.dumps(machine))  # before any state is materialized
    assert not {"nfa_box", "dfa_box"} & set(copy.__getstate__())
    first_box = machine.dfa_box
    seen = build_all(machine)
    assert machine.dfa.table.shape[0] > 512 and machine.dfa_box is not first_box  # grown
    n = int(machine.dfa.meta[lazydfa._STATES])
    assert n >= len(seen) > 512 and machine.dfa.done[sorted(seen)].all()
    assert build_all(copy) == seen  # the copy's kernels wrote the copy's own arrays
    assert int(copy.dfa.meta[lazydfa._STATES]) == n
    assert (copy.dfa.table[:n] == machine.dfa.table[:n]).all()


def test_a_copied_vocabulary_makes_its_own_boxes_and_masks_as_the_original(compiler):
    """A Vocabulary pickled (or deep-copied) leaves its trie's box and its layouts behind and
    makes them again: a grammar on the copy gives the original's masks."""
    import pickle

    from grammars.compiler import build_machine

    vocab = compiler.vocab
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy._chains == {} and copy.trie_box is not vocab.trie_box
    machine = build_machine("json_schema", {"type": "object", "properties": {"a": {}}})
    ours = grammar.CompiledGrammar(machine, vocab).matcher()
    theirs = grammar.CompiledGrammar(pickle.loads(pickle.dumps(machine)), copy).matcher()
    for _ in range(6):
        mask = ours.next_token_mask()
        assert (mask == theirs.next_token_mask()).all()
        token = int(np.flatnonzero(mask)[-1])
        assert ours.accept_token(token) and theirs.accept_token(token)


def test_byte_classes_are_the_bytes_read_by_the_same_edges():
    """lazydfa._split_classes: two bytes share a class exactly when the same edges read them,
    and the classes hold every byte some edge reads, each once (sets of random sizes, single
    bytes among them, up to 70 edges: more than materialize's scratch arrays hold, EDGE_ROOM)."""
    rng = np.random.default_rng(5)
    for n_edges in (1, 2, 3, 8, 70):
        sets = []
        for _ in range(n_edges):
            k = int(rng.choice([1, 1, 4, 40, 200]))
            sets.append(set(rng.choice(256, size=k, replace=False).tolist()))
        bits = np.zeros((n_edges, 4), np.uint64)
        for e, members in enumerate(sets):
            for b in members:
                bits[e, b >> 6] |= np.uint64(1 << (b & 63))
        cls = np.empty((256, 4), np.uint64)
        n = lazydfa._split_classes(bits, n_edges, cls)
        classes = [
            {64 * w + i for w in range(4) for i in range(64) if int(cls[c, w]) >> i & 1}
            for c in range(n)
        ]
        assert all(classes)
        assert sorted(b for c in classes for b in c) == sorted(set().union(*sets))
        for c in classes:
            readers = {tuple(b in s for s in sets) for b in c}
            assert len(readers) == 1
        assert len({tuple(min(c) in s for s in sets) for c in classes}) == n


def test_states_of_more_byte_moves_than_the_scratch_arrays_hold(compiler, checker):
    """A state reading more byte moves than materialize's scratch arrays hold (90 branches
    after the "x") takes arrays of its own: masks exact along each branch, others refused."""
    words = [f"{c}{i:02d}" for i, c in enumerate("abcdefghijklmnopqrstuvwxyz" * 4)][:90]
    grammar = compiler.compile_regex("x(" + "|".join(words) + ")")
    for w in words:
        assert checker.accepts(grammar, "x" + w)
    for bad in ("xa01", "xb00", "x", "xz99", "a00"):
        assert not checker.accepts(grammar, bad)
    arrays, dfa = grammar.machine.arrays, grammar.machine.dfa
    moves = [
        sum(int(arrays.e_ptr[x + 1] - arrays.e_ptr[x]) for x in dfa.mem[a:z])
        for a, z in zip(dfa.m_ptr[: dfa.meta[0]], dfa.m_ptr[1 : dfa.meta[0] + 1])
    ]
    assert max(moves) > arrays.edge_tgts.shape[0]


_SCHEMAS = [
    ("json_schema", {"type": "object", "properties": {"a": {"type": "string"}, "b": {}}}),
    ("json_schema", {"type": "array", "items": {"type": "string", "pattern": "^[^x]+$"}}),
    ("json_schema", {"type": "array", "items": {"type": "string", "maxLength": 12}}),
    ("json_schema", {"type": "string", "minLength": 3, "maxLength": 9}),
    ("regex", "[^x]*x"),
    ("regex", "(\u00e9|[\u0100-\U0010ffff])*"),  # 0xC2 leads nowhere
    ("regex", "[^a]*\u00e9[^\u0800-\uffff]+x"),  # two moves read 0xC3; no 3-byte leads
]


def _built(compiler, kind, spec):
    """The machine of a grammar whose first mask was filled and whose first 40 states were
    materialised, with room for more (no NEED_SPACE in the calls below)."""
    grammar = getattr(compiler, f"compile_{kind}")(spec)
    machine = grammar.machine
    grammar.matcher().fill_next_token_bitmask(np.zeros(compiler.vocab.words, np.int32))
    machine.dfa = lazydfa_arrays.grown(machine.dfa, 4096)
    for s in range(1, min(40, int(machine.dfa.meta[0]))):
        machine._run(lazydfa.materialize, s)
    return machine


@pytest.mark.parametrize("kind, spec", _SCHEMAS)
def test_utf8_targets_read_from_moves_agree_with_the_states_built(compiler, kind, spec):
    """lazydfa_chain._utf8_target_by_moves (a character's steps read from the NFA's moves)
    gives what lazydfa.utf8_target gives from the lazy states it builds, wherever it answers;
    it answers for strings' bodies and counters."""
    machine = _built(compiler, kind, spec)
    found = 0
    for s in range(1, int(machine.dfa.meta[0])):
        dfa, arrays = machine.dfa_box, machine.nfa_box  # as the kernels are called
        fast = lazydfa_chain._utf8_target_by_moves(arrays, dfa, s)
        if fast == lazydfa_chain._BY_ROWS:
            continue
        found += fast > 0
        for can_pop in (0, 1):
            assert fast == lazydfa.utf8_target(arrays, dfa, s, can_pop), (s, can_pop)
    assert found or kind == "regex"


@pytest.mark.parametrize("kind, spec", _SCHEMAS)
def test_mask_targets_read_from_moves_agree_with_the_rows(compiler, kind, spec):
    """lazydfa_chain._mask_target (a chain's next state from the members' moves) is the state
    the built row sends every byte of the mask to (0 where they go nowhere, or not all to one
    state), wherever it answers; it answers for the masks of strings' characters."""
    machine = _built(compiler, kind, spec)
    masks = [bytes(range(0x20, 0x7F)).replace(b'"', b"").replace(b"\\", b""), b"abcxyz", b"7"]
    answered = 0
    for s in range(1, int(machine.dfa.meta[0])):
        for mask in masks:
            dfa, arrays = machine.dfa_box, machine.nfa_box
            words = np.zeros(4, np.uint64)
            for b in mask:
                words[b >> 6] |= np.uint64(1 << (b & 63))
            fast = lazydfa_chain._mask_target(arrays, dfa, s, words)
            if fast == lazydfa_chain._BY_ROWS:
                continue
            answered += 1
            machine._run(lazydfa.materialize, s)
            row, viable = machine.dfa.table[s], machine.dfa.viable[s]
            targets = {int(row[b]) for b in mask}
            sent = targets.pop() if len(targets) == 1 and not viable[list(mask)].any() else 0
            assert fast == sent, (s, mask)
    assert answered


def test_most_common_target_counts_as_a_sort_of_the_row_does():
    """lazydfa_chain._most_common_target (targets counted in order of their first byte)
    agrees with counting runs of the sorted row, ties going to the first byte, on rows of few
    targets, of exactly and more than _FEW_TARGETS (sorted then), and below MIN_CHAIN_BYTES."""
    rng = np.random.default_rng(11)
    few = lazydfa_chain._FEW_TARGETS
    rows = []
    for n_targets in (1, 2, 3, 5, 16, few, few + 1, 200):
        for live in (8, 15, 16, 40, 256):
            row = np.zeros(256, np.int32)
            picked = rng.choice(256, size=live, replace=False)
            row[picked] = rng.integers(1, n_targets + 1, size=live) + 100 * rng.integers(0, 3)
            rows.append(row)
    tie = np.zeros(256, np.int32)  # two targets of 128 bytes each: the first byte's wins
    tie[1::2], tie[0::2] = 7, 9
    rows.append(tie)
    table = np.array(rows)
    for s, row in enumerate(rows):
        values, counts = np.unique(row[row != 0], return_counts=True)
        want = 0
        if len(counts) and counts.max() >= lazydfa_chain.MIN_CHAIN_BYTES:
            best = values[counts == counts.max()]
            want = min(best, key=lambda t: int(np.flatnonzero(row == t)[0]))
        assert lazydfa_chain._most_common_target(table, s) == want, s
    assert lazydfa_chain._most_common_target(table, len(rows) - 1) == 9


def test_candidate_kernels_agree_with_numpy():
    """The compiled steps of a mask's candidate checks (lazydfa_walk.unset_of,
    lazydfa.sorted_rows) give what the numpy expressions they replace gave."""
    rng = np.random.default_rng(3)
    size = 5000
    for n in (0, 1, 7, 300, 4000):
        words = rng.integers(0, 2**32, size=size // 32 + 1, dtype=np.uint64).astype(np.uint32)
        tokens = rng.choice(size, size=n, replace=False).astype(np.int64)
        want = tokens[(words[tokens >> 5] >> (tokens & 31)) & 1 == 0]
        assert np.array_equal(lazydfa_walk.unset_of(words, tokens), want)

        data = rng.integers(97, 100, size=3 * size).astype(np.uint8)  # rows of 0-5 bytes
        ptr = np.concatenate(([0], np.cumsum(rng.integers(0, 6, size=size)))).astype(np.int64)
        row_of = rng.permutation(size).astype(np.int64)
        rows, shared = lazydfa.sorted_rows(row_of, tokens, data, ptr)
        assert np.array_equal(rows, np.sort(row_of[tokens]))
        assert np.array_equal(shared, lazydfa.shared_prefixes(data, ptr, rows))
