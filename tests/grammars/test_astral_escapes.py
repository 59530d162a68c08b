"""Characters beyond the BMP inside JSON strings: json.dumps writes them as surrogate-pair
escapes (U+1F600 as \\ud83d\\ude00), so every string automaton (patterns, enums, keys,
lengths) must read that spelling as the character, and no other pair."""

import json
import random
import re

import pytest

from grammars.automaton import EagerDFA
from grammars.regex import _surrogate_pairs

_EMOJI = "😀"  # U+1F600: \ud83d\ude00


def test_surrogate_pairs_spell_exactly_their_range():
    rng = random.Random(7)
    for _ in range(40):
        lo = rng.randint(0x10000, 0x10FFFF)
        hi = min(0x10FFFF, lo + rng.choice([0, 5, 1023, 1024, 3000, 400_000]))
        dfa = EagerDFA.from_node(_surrogate_pairs(lo, hi))
        probes = [lo, hi, lo - 1, hi + 1, lo | 0x3FF, (hi & ~0x3FF) - 1]
        probes += [rng.randint(0x10000, 0x10FFFF) for _ in range(40)]
        for c in probes:
            if 0x10000 <= c <= 0x10FFFF:
                pair = json.dumps(chr(c))[1:-1]
                for spelling in (pair, pair.upper().replace("\\U", "\\u")):
                    assert dfa.accepts(spelling.encode()) == (lo <= c <= hi), (lo, hi, c)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^😀$"},
        {"type": "string", "pattern": "^[😀-😂]$"},
        {"type": "string", "pattern": "^[^a]$"},
        {"enum": ["😀", "b"]},
        {"const": "😀"},
    ],
)
def test_values_with_astral_characters_in_every_spelling(compiler, checker, schema):
    grammar = compiler.compile_json_schema(schema)
    assert checker.accepts(grammar, json.dumps(_EMOJI))  # \ud83d\ude00
    assert checker.accepts(grammar, json.dumps(_EMOJI, ensure_ascii=False))
    assert checker.accepts(grammar, '"\\uD83D\\uDE00"')
    assert not checker.accepts(grammar, '"\\ud83d"')  # a lone surrogate is no character
    assert not checker.accepts(grammar, '"\\ude00\\ud83d"')  # the pair the wrong way round
    other = "🙃"  # U+1F643, outside every class above but [^a]
    expected = "pattern" in schema and re.search(schema["pattern"], other) is not None
    assert checker.accepts(grammar, json.dumps(other)) == expected


def test_astral_keys_as_json_dumps_writes_them(compiler, checker):
    schema = {
        "type": "object",
        "properties": {_EMOJI: {"type": "integer"}},
        "required": [_EMOJI],
        "additionalProperties": False,
    }
    grammar = compiler.compile_json_schema(schema)
    assert checker.accepts(grammar, json.dumps({_EMOJI: 1}))
    assert checker.accepts(grammar, json.dumps({_EMOJI: 1}, ensure_ascii=False))
    assert not checker.accepts(grammar, json.dumps({"🙃": 1}))
    names = compiler.compile_json_schema(
        {"type": "object", "propertyNames": {"pattern": "^😀"}, "maxProperties": 1}
    )
    assert checker.accepts(names, json.dumps({_EMOJI + "x": 1}))
    assert not checker.accepts(names, json.dumps({"🙃": 1}))
