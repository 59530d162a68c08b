"""The helpers under the grammar engine's arrays: growth, bit setting and mask rows."""

import numpy as np

from grammars import grammar, lazydfa_walk
from grammars.lazydfa_arrays import enlarged


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
