"""The matcher's half of uniqueItems over free strings (json_schema/unique.py says which arrays).

A matcher whose grammar has a UniquePlan follows the JSON text it accepts with a small scanner:
the open containers (each with its json_schema.unique.Place), the key each object is at, the
index each array is at and, in an array that must hold distinct items, the items seen so far
(as decoded strings: `"\\u0061"` and `"a"` are one value). A token that would complete an item
equal to an earlier one is refused by accept_token and left out of the mask. The scanner's
state is immutable (a tuple), so the matcher keeps one per accepted token and rolls back with
its history.

The grammar has already checked the syntax, so the scanner only looks at structure: quotes,
escapes, brackets, colons and commas (numbers, literals and whitespace pass through).
"""

from __future__ import annotations

import json
import re

import numpy as np

_OBJ, _ARR = 0, 1
_NONE, _KEY, _ITEM = 0, 1, 2  # what the string being read is to the scanner
_SPECIAL = re.compile(rb'["\\]')
_STRUCTURE = re.compile(rb'[]["{}:,]')
_MIN_QUOTES_ANYWHERE = 4  # `["a","a"` in one token: the least a token needs to add a duplicate
# to an array it opens

# State: (frames, in_string, escape pending, collected bytes, role). A frame is
# (_OBJ, place, key, expecting a key) or (_ARR, place, index, seen strings or None).
State = tuple


def initial_state() -> State:
    return ((), False, False, b"", _NONE)


def _decoded(raw: bytes) -> str:
    if b"\\" not in raw:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return json.loads(b'"' + raw + b'"')


def feed(plan, state: State, data: bytes) -> State | None:
    """The state after `data`; None when it completes an item equal to an earlier item of its
    array."""
    frames, in_str, esc, buf, role = state
    i, n = 0, len(data)
    while i < n:
        if in_str:
            if esc:  # the byte after a backslash
                if role:
                    buf += data[i : i + 1]
                esc = False
                i += 1
                continue
            m = _SPECIAL.search(data, i)
            if m is None:
                if role:
                    buf += data[i:]
                break
            j = m.start()
            if role:
                buf += data[i:j]
            if data[j] == 0x5C:  # a backslash: the next byte is escaped
                if role:
                    buf += b"\\"
                esc = True
                i = j + 1
                continue
            in_str = False  # the closing quote
            i = j + 1
            if role == _KEY:
                kind, place, _, _ = frames[-1]
                frames = frames[:-1] + ((kind, place, _decoded(buf), False),)
            elif role == _ITEM:
                kind, place, index, seen = frames[-1]
                value = _decoded(buf)
                if value in seen:
                    return None
                frames = frames[:-1] + ((kind, place, index, seen | {value}),)
            buf, role = b"", _NONE
            continue
        m = _STRUCTURE.search(data, i)
        if m is None:
            break
        j = m.start()
        c = data[j]
        i = j + 1
        top = frames[-1] if frames else None
        if c == 0x22:  # '"': a string opens
            in_str = True
            if top is None:
                role = _NONE
            elif top[0] == _OBJ:
                role = _KEY if top[3] and top[1] is not None else _NONE
            else:
                role = _ITEM if top[3] is not None else _NONE
        elif c == 0x7B or c == 0x5B:  # '{' or '[': a container opens
            place = _below(plan, top)
            if place is not None:
                place = place.typed("object" if c == 0x7B else "array")
            if c == 0x7B:
                frames = frames + ((_OBJ, place, None, True),)
            else:
                seen = frozenset() if place is not None and place.unique else None
                frames = frames + ((_ARR, place, 0, seen),)
        elif c == 0x7D or c == 0x5D:  # '}' or ']'
            frames = frames[:-1]
        elif top is None:
            continue
        elif c == 0x3A:  # ':'
            frames = frames[:-1] + ((_OBJ, top[1], top[2], False),)
        elif top[0] == _OBJ:  # ','
            frames = frames[:-1] + ((_OBJ, top[1], None, True),)
        else:
            frames = frames[:-1] + ((_ARR, top[1], top[2] + 1, top[3]),)
    return frames, in_str, esc, buf, role


def _below(plan, top):
    """The place of a value that opens under frame `top`."""
    if top is None:
        return plan.root
    kind, place, at, _ = top
    if place is None:
        return None
    if kind == _OBJ:
        return None if at is None else place.key(at)
    return place.item(at)


class TokenQuotes:
    """Per vocabulary: the tokens holding a quote, and those holding several (packed words)."""

    def __init__(self, vocab):
        counts = np.fromiter((t.count(b'"') for t in vocab.token_bytes), np.int64)
        counts = np.pad(counts, (0, vocab.size - len(counts)))
        self.one = vocab.pack(counts >= 1)
        self.two = vocab.pack(counts >= 2)
        self.many = vocab.pack(counts >= _MIN_QUOTES_ANYWHERE)


def token_quotes(vocab) -> TokenQuotes:
    hit = vocab.__dict__.get("_token_quotes")
    if hit is None:
        hit = vocab._token_quotes = TokenQuotes(vocab)
    return hit


def filtered_mask(plan, state: State, words: np.ndarray, vocab) -> np.ndarray:
    """`words` (the grammar's mask, not changed) without the tokens that would complete a
    duplicate item from `state`."""
    frames, in_str, _, _, role = state
    quotes = token_quotes(vocab)
    top = frames[-1] if frames else None
    tracked = top is not None and top[0] == _ARR and top[3] is not None
    if in_str and role == _ITEM:
        need = quotes.one  # the item's closing quote
    elif tracked and not in_str and top[3]:
        need = quotes.two  # a whole item
    else:
        need = quotes.many
    hits = np.flatnonzero(words & need)
    if not len(hits):
        return words
    out = None
    for w in hits.tolist():
        bits = int(words[w]) & int(need[w]) & 0xFFFFFFFF
        while bits:
            low = bits & -bits
            bits ^= low
            token = 32 * w + low.bit_length() - 1
            if feed(plan, state, vocab.token_bytes[token]) is None:
                if out is None:
                    out = words.copy()
                kept = int(out[w]) & 0xFFFFFFFF & ~low
                out[w] = kept - (1 << 32) if kept >> 31 else kept
    return words if out is None else out
