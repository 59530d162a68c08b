"""GrammarMatcher: the state of one generation over a grammars.grammar.CompiledGrammar.

The automaton's state is one integer per accepted token (its history). A grammar whose JSON
schema leaves uniqueItems to the matcher (json_schema/unique.py) also has a scanner state per
token (unique_items.py), which refuses duplicate items in accept_token and in the masks.
"""

from __future__ import annotations

import numpy as np

from grammars import unique_items


def _utf8_prefix(data: bytes) -> str:
    """The longest prefix of `data` made of whole UTF-8 characters."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="ignore")


class GrammarMatcher:
    """The state of one generation: cheap to create, rolls back, never changes on refusal."""

    def __init__(self, grammar):
        self.grammar = grammar
        self._history: list[int] = [grammar.initial]
        self._terminated = False
        self._unique = grammar.machine.unique  # a UniquePlan, or None (nearly always)
        self._scans = [unique_items.initial(self._unique)] if self._unique is not None else None

    @property
    def state(self) -> int:
        """The automaton's state (with a UniquePlan, the items seen so far are not in it)."""
        return self._history[-1]

    def _scanned(self, data: bytes) -> bool:
        """Follow `data` with the uniqueness scanner; False (nothing kept) on a duplicate."""
        nxt = unique_items.feed(self._unique, self._scans[-1], data)
        if nxt is None:
            return False
        self._scans.append(nxt)
        return True

    def accept_token(self, token_id: int) -> bool:
        g = self.grammar
        if self._terminated:
            return False
        hist = self._history
        key = g.token_key(hist[-1], token_id)
        if key is not None:  # a token read here before: one lookup
            nxt = g._token_steps.get(key)
            if nxt is not None:
                if self._unique is not None and not self._scanned(g.vocab.token_bytes[token_id]):
                    return False
                hist.append(nxt)
                return True
        if token_id in g.vocab.eos_set:
            if g.is_complete(self.state):
                self._terminated = True
                self._history.append(self.state)
                if self._unique is not None:
                    self._scans.append(self._scans[-1])
                return True
            return False
        if not 0 <= token_id < g.vocab.size or token_id in g.vocab.special_set:
            return False
        data = g.vocab.token_bytes[token_id]
        if not data:
            return False
        nxt = g.walk(self.state, data)
        if not nxt:
            return False
        g.remember_token(key, nxt)
        if self._unique is not None and not self._scanned(data):
            return False
        self._history.append(nxt)
        return True

    def accept_string(self, text: str | bytes) -> bool:
        data = text.encode("utf-8") if isinstance(text, str) else text
        if self._terminated:
            return not data
        nxt = self.grammar.walk(self.state, data) if data else self.state
        if not nxt:
            return False
        if self._unique is not None and not self._scanned(data):
            return False
        self._history.append(nxt)
        return True

    def _words(self) -> np.ndarray:
        """The allowed tokens as packed words (the grammar's memoised array: not to change)."""
        g = self.grammar
        if self._terminated:
            return g.vocab.eos_only
        words = g._masks.get(self._history[-1])  # mask(), without the call when known
        if words is None:
            words = g.mask(self._history[-1])
        if self._unique is not None:
            words = unique_items.filtered_mask(self._unique, self._scans[-1], words, g.vocab)
        return words

    def fill_next_token_bitmask(self, bitmask, index: int = 0) -> None:
        words = self._words()
        if type(bitmask) is np.ndarray and bitmask.ndim == 1 and len(bitmask) == len(words):
            bitmask[...] = words  # the common case, in the fewest steps
            return
        target = bitmask
        if not isinstance(bitmask, np.ndarray):  # a torch tensor
            if bitmask.device.type != "cpu":
                row = bitmask[index] if bitmask.dim() == 2 else bitmask
                row.zero_()
                row[: len(words)].copy_(_to_torch(words, bitmask.device))
                return
            target = bitmask.numpy()
        row = target[index] if target.ndim == 2 else target
        if row.shape[0] == words.shape[0]:
            np.copyto(row, words)
        else:
            row[: len(words)] = words
            row[len(words) :] = 0

    def next_token_mask(self) -> np.ndarray:
        """The allowed token ids as a boolean array over the vocabulary."""
        return self.grammar.vocab.unpack(self._words())

    def is_terminated(self) -> bool:
        return self._terminated

    def is_completed(self) -> bool:
        """The text so far is a complete match (EOS would be accepted)."""
        return self._terminated or self.grammar.is_complete(self.state)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens < 0 or num_tokens >= len(self._history):
            raise ValueError(
                f"cannot roll back {num_tokens} tokens ({len(self._history) - 1} accepted)"
            )
        if num_tokens:
            del self._history[-num_tokens:]
            if self._scans is not None:
                del self._scans[-num_tokens:]
            self._terminated = False

    def find_jump_forward_string(self) -> str:
        if self._terminated:
            return ""
        forced = self.grammar.jump_forward_bytes(self.state)
        scans = self._scans
        if (
            scans is not None
            and forced
            and unique_items.feed(self._unique, scans[-1], forced) is None
        ):
            return ""  # it would complete a duplicate: the masks refuse it token by token
        return _utf8_prefix(forced)

    def reset(self) -> None:
        self._history = [self.grammar.initial]
        if self._scans is not None:
            self._scans = [unique_items.initial(self._unique)]
        self._terminated = False


def _to_torch(words: np.ndarray, device):
    import torch

    return torch.from_numpy(words).to(device)
