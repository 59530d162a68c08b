"""Incremental detokenization: growing token ids to text deltas, held back at stop strings."""

from __future__ import annotations


class IncrementalDecoder:
    """Turns a growing list of token ids into text deltas.

    A delta never ends inside a multi-byte character, never shows text that may still turn out
    to be the start of a stop string, and the final text is trimmed at the matched stop token
    or stop string unless `no_stop_trim` is set.
    """

    def __init__(self, tokenizer, skip_special_tokens=True, stop_strings=(), no_stop_trim=False):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop_strings = list(stop_strings)
        self.no_stop_trim = no_stop_trim
        self.ids: list[int] = []
        self.sent = 0  # characters already returned
        self.text = ""  # decoded text of ids[:read_offset]
        self.prefix_offset = 0  # decoding restarts a few tokens back, so merges stay correct
        self.read_offset = 0

    def push(self, new_ids: list[int], finish_reason: dict | None = None, offset: int = -1) -> str:
        """The text delta after `new_ids` replace the ids from `offset` on (-1: append). A
        replacement (jump-forward retokenizing) keeps the text a prefix of the new text."""
        if 0 <= offset < len(self.ids):
            self._rewind(offset)
        self.ids.extend(new_ids)
        if finish_reason is not None:
            text = self.final_text(finish_reason)
        else:
            # decode only the tail: text of ids[prefix_offset:] minus that of ids[prefix_offset:read_offset]
            settled = self._decode(self.ids[self.prefix_offset : self.read_offset])
            tail = self._decode(self.ids[self.prefix_offset :])
            if tail.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for its bytes
                return ""
            self.text += tail[len(settled) :]
            self.prefix_offset = max(self.read_offset - 4, 0)
            self.read_offset = len(self.ids)
            hold = max((len(s) for s in self.stop_strings), default=1) - 1
            text = self.text[: len(self.text) - hold] if hold else self.text
        delta = text[self.sent :]
        self.sent = max(self.sent, len(text))
        return delta

    def _rewind(self, offset: int) -> None:
        del self.ids[offset:]
        if self.read_offset > offset:
            self.read_offset = offset
            self.text = self._decode(self.ids[:offset])
            while self.text.endswith("\ufffd") and self.read_offset > 0:
                self.read_offset -= 1
                self.text = self._decode(self.ids[: self.read_offset])
            self.prefix_offset = max(self.read_offset - 4, 0)

    def final_text(self, finish_reason: dict | None) -> str:
        matched = (
            (finish_reason or {}).get("matched")
            if (finish_reason or {}).get("type") == "stop"
            else None
        )
        ids = self.ids
        if isinstance(matched, int) and not self.no_stop_trim and ids and ids[-1] == matched:
            ids = ids[:-1]
        text = self._decode(ids)
        if isinstance(matched, str) and not self.no_stop_trim:
            cut = text.find(matched)
            if cut >= 0:
                text = text[:cut]
        return text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)
