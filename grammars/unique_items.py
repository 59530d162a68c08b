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

import bisect
import json
import re

import numpy as np

_OBJ, _ARR = 0, 1
_NONE, _KEY, _ITEM, _CHOICE = 0, 1, 2, 3  # what the string being read is to the scanner
# (_CHOICE: the value of the key that picks an object's branch, Place.choice)
_SPECIAL = re.compile(rb'["\\]')
_STRUCTURE = re.compile(rb'[]["{}:,]')
_MIN_QUOTES_ANYWHERE = 4  # `["a","a"` in one token: the least a token needs to add a duplicate
# to an array it opens

# State: (frames, in_string, escape pending, collected bytes, role). A frame is
# (_OBJ, place, key, expecting a key) or (_ARR, place, index, the items' values so far as
# _value gives them, or None where the array needs no check).
State = tuple


_JSON_START = ((), False, False, b"", _NONE)
_TEXT, _IN_JSON, _AFTER_JSON = 0, 1, 2  # where a TaggedPlan's scanner is


class TaggedPlan:
    """The plans of a structural tag's schemas: the scanner passes over free text until a
    trigger, reads which structure's `begin` follows, follows that structure's JSON document
    (with its UniquePlan, or None) up to its outermost container's end, then waits for the
    structure's `end`. Built only where that reading is certain (tagged_plan)."""

    def __init__(self, triggers: list[bytes], begins: list[bytes], ends: list[bytes], plans):
        self.triggers, self.begins, self.ends, self.plans = triggers, begins, ends, plans
        self._keep = max(map(len, triggers)) - 1  # text kept while no trigger has appeared

    def feed(self, state, data: bytes):
        jstate, phase, k, tail = state
        i, n = 0, len(data)
        while i < n:
            if phase == _IN_JSON:
                jstate, j = _json(self.plans[k], jstate, data, i)
                if jstate is None:
                    return None
                if j < 0:
                    break
                i, phase, tail = j, (_AFTER_JSON if self.ends[k] else _TEXT), b""
                continue
            text = tail + data[i:]
            if phase == _AFTER_JSON:
                end = self.ends[k]
                at = text.find(end)
                if at < 0:
                    tail = text[max(len(text) - len(end) + 1, 0) :]
                    break
                i += at + len(end) - len(tail)
                phase, tail = _TEXT, b""
                continue
            at = min((x for x in (text.find(t) for t in self.triggers) if x >= 0), default=-1)
            if at < 0:
                tail = text[max(len(text) - self._keep, 0) :]
                break
            rest = text[at:]
            k = next((j for j, b in enumerate(self.begins) if rest.startswith(b)), -1)
            if k < 0:  # the begin is not whole yet
                tail = rest
                break
            i += at + len(self.begins[k]) - len(tail)
            jstate, phase, tail = _JSON_START, _IN_JSON, b""
        return jstate, phase, k, tail


def tagged_plan_possible(structures, triggers) -> bool:
    """Whether a scanner can tell where each structure's JSON is from the text alone: every
    schema declares an object or array (the document ends where its outermost container
    closes), no begin is a prefix of another, and no trigger's tail (nor a begin's) can be the
    start of a begin (so the first trigger in free text starts a structure, and the begin found
    there is the one written)."""
    if any(
        not isinstance(s, dict) or s.get("type") not in ("object", "array")
        for _, s, _ in structures
    ):
        return False
    begins = sorted(b.encode("utf-8", "surrogatepass") for b, _, _ in structures)
    # a begin that is a prefix of another is a prefix of the next one in sorted order
    if any(b.startswith(a) for a, b in zip(begins, begins[1:])):
        return False
    starts = {b[0] for b in begins}  # a tail that can start a begin starts with one of these
    for head in [t.encode("utf-8", "surrogatepass") for t in triggers] + begins:
        for k in range(1, len(head)):
            if head[k] not in starts:
                continue
            tail = head[k:]
            at = bisect.bisect_left(begins, tail)  # the first begin that may start with it
            if at < len(begins) and begins[at].startswith(tail):
                return False
            if any(tail.startswith(b) for b in begins):
                return False
    return True


def _value(raw: bytes) -> bytes:
    """A JSON string's value as UTF-8 (lone surrogates kept), from its bytes between quotes:
    one spelling per value."""
    if b"\\" not in raw:
        return raw
    return json.loads(b'"' + raw + b'"').encode("utf-8", "surrogatepass")


def initial(plan) -> State:
    """The scanner's state before any text, for `plan` (a UniquePlan or a TaggedPlan)."""
    return (_JSON_START, _TEXT, 0, b"") if isinstance(plan, TaggedPlan) else _JSON_START


def feed(plan, state: State, data: bytes) -> State | None:
    """The state after `data`; None when it completes an item equal to an earlier item of its
    array."""
    if isinstance(plan, TaggedPlan):
        return plan.feed(state, data)
    return _json(plan, state, data, 0)[0]


def _json(plan, state: State, data: bytes, i: int) -> tuple[State | None, int]:
    """(the state after data[i:], -1), or (the state, the index after it) where the document's
    outermost container closes; (None, -1) on a duplicate item."""
    frames, in_str, esc, buf, role = state
    n = len(data)
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
                key = json.loads(b'"' + buf + b'"')
                frames = frames[:-1] + ((kind, place, key, False),)
            elif role == _CHOICE:
                kind, place, key, _ = frames[-1]
                place = place.chosen(json.loads(b'"' + buf + b'"'))
                frames = frames[:-1] + ((kind, place, key, False),)
            elif role == _ITEM:
                kind, place, index, seen = frames[-1]
                value = _value(buf)
                if value in seen:
                    return None, -1
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
                place = top[1]
                if place is None:
                    role = _NONE
                elif top[3]:
                    role = _KEY
                else:
                    choice = place.choice
                    role = _CHOICE if choice is not None and top[2] == choice[0] else _NONE
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
            if not frames:
                return (frames, in_str, esc, buf, role), i
        elif top is None:
            continue
        elif c == 0x3A:  # ':'
            frames = frames[:-1] + ((_OBJ, top[1], top[2], False),)
        elif top[0] == _OBJ:  # ','
            frames = frames[:-1] + ((_OBJ, top[1], None, True),)
        else:
            frames = frames[:-1] + ((_ARR, top[1], top[2] + 1, top[3]),)
    return (frames, in_str, esc, buf, role), -1


def _below(plan, top):
    """The place of a value that opens under frame `top`."""
    if top is None:
        return None if plan is None else plan.root
    kind, place, at, _ = top
    if place is None:
        return None
    if kind == _OBJ:
        return None if at is None else place.key(at)
    return place.item(at)


class TokenQuotes:
    """Per vocabulary, the tokens by their quotes: those holding one, two or more, or
    _MIN_QUOTES_ANYWHERE; `special`, those the scanner must read (a backslash beside a quote,
    or several quotes) (each a _sparse pair of packed words); `closing`, the others with one
    quote by the bytes before it."""

    def __init__(self, vocab):
        counts = np.fromiter((t.count(b'"') for t in vocab.token_bytes), np.int64)
        counts = np.pad(counts, (0, vocab.size - len(counts)))
        escaped = np.zeros(vocab.size, np.bool_)
        self.closing: dict[bytes, list[int]] = {}
        for token in np.flatnonzero(counts == 1).tolist():
            data = vocab.token_bytes[token]
            if b"\\" in data:
                escaped[token] = True
            else:
                self.closing.setdefault(data[: data.index(b'"')], []).append(token)
        self.one = _sparse(vocab.pack(counts >= 1))
        self.two = _sparse(vocab.pack(counts >= 2))
        self.many = _sparse(vocab.pack(counts >= _MIN_QUOTES_ANYWHERE))
        self.special = _sparse(vocab.pack((counts >= 2) | escaped))


def _sparse(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the indices of the words with a bit set, those words): few, for sets of rare tokens."""
    at = np.flatnonzero(words)
    return at, words[at]


def token_quotes(vocab) -> TokenQuotes:
    hit = vocab.__dict__.get("_token_quotes")
    if hit is None:
        hit = vocab._token_quotes = TokenQuotes(vocab)
    return hit


def filtered_mask(plan, state: State, words: np.ndarray, vocab) -> np.ndarray:
    """`words` (the grammar's mask, not changed) without the tokens that would complete a
    duplicate item from `state`."""
    jstate = state
    if isinstance(plan, TaggedPlan):  # outside a structure's JSON: only many quotes matter
        jstate = state[0] if state[1] == _IN_JSON else _JSON_START
    frames, in_str, esc, buf, role = jstate
    quotes = token_quotes(vocab)
    top = frames[-1] if frames else None
    out = words
    if in_str and role == _ITEM:
        seen = top[3]
        if not seen:
            check = quotes.two  # this item, then a whole duplicate
        elif esc or b"\\" in buf:
            check = quotes.one  # (escapes in the item: every closing token read)
        else:  # the common case: only a seen item that extends this one can be completed
            for value in seen:
                if value.startswith(buf):
                    for token in quotes.closing.get(value[len(buf) :], ()):
                        out = _without(out, words, token)
            check = quotes.special
    elif top is not None and top[0] == _ARR and top[3] and not in_str:
        check = quotes.two  # a whole item
    else:
        check = quotes.many
    at, bits_at = check
    both = words[at] & bits_at
    hit = both != 0
    for w, bits in zip(at[hit].tolist(), both[hit].tolist()):
        bits &= 0xFFFFFFFF
        while bits:
            low = bits & -bits
            bits ^= low
            token = 32 * w + low.bit_length() - 1
            if feed(plan, state, vocab.token_bytes[token]) is None:
                out = _without(out, words, token)
    return out


def _without(out: np.ndarray, words: np.ndarray, token: int) -> np.ndarray:
    """`out` without `token` (a copy first while `out` is still the grammar's `words`)."""
    if out is words:
        out = words.copy()
    w = token >> 5
    kept = int(out[w]) & 0xFFFFFFFF & ~(1 << (token & 31))
    out[w] = kept - (1 << 32) if kept >> 31 else kept
    return out
