"""Jump-forward decoding: text a grammar forces is appended at once, not decoded token by token.

After a constrained request accepts a token, its matcher may admit exactly one continuation
(`{"name": "` after `{`, a fixed key, the rest of an enum value once its prefix is decided).
That text is appended to the output, and the last few output tokens are encoded again together
with it, so the output holds the tokens the tokenizer itself would give that text; the longest
common prefix with the old tokens is kept, the matcher rolls back to it and accepts the new
tokens, and the scheduler computes their KV in one extend step.

The output text after a jump is exactly the old text plus the forced text: a jump that would
change the text (a tokenizer that does not round-trip, a character split across tokens) or that
the matcher refuses is not taken. The tokens may differ from what token-by-token decoding would
have chosen. The last token of the forced text is left to the model (unless the grammar ends
there), because it may merge with what follows: a forced `{` appended alone would push the model
off the `{"` token it would have written.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.scheduler.req import Req

RETOKENIZE_TAIL = 4  # output tokens encoded again with the forced text (merges across the seam)


@dataclass
class Jump:
    keep: int  # output tokens left as they were; the ones after them are new
    added: int  # tokens appended after `keep`


def jump_forward(req: Req, tokenizer, max_output: int) -> Jump | None:
    """Append the text `req.grammar` forces to `req.output_ids` (at most `max_output` output
    tokens in all); None when nothing is forced or the jump is not safe."""
    matcher = req.grammar
    forced = matcher.find_jump_forward_string()
    if not forced:
        return None
    out = req.output_ids
    start = max(len(out) - RETOKENIZE_TAIL, 0)
    tail = _decode(tokenizer, out[start:])
    while tail.startswith("\ufffd") and start > 0 and len(out) - start < 2 * RETOKENIZE_TAIL:
        start -= 1  # the tail began inside a character
        tail = _decode(tokenizer, out[start:])
    if "\ufffd" in tail:  # a character still split (or one the model wrote): leave it alone
        return None
    text = tail + forced
    new_ids = tokenizer.encode(text, add_special_tokens=False)
    if _decode(tokenizer, new_ids) != text:
        return None
    keep = start
    for old, new in zip(out[start:], new_ids):
        if old != new:
            break
        keep += 1
    end = len(new_ids)
    if not matcher.grammar.is_complete(matcher.grammar.walk(matcher.state, forced.encode())):
        end -= 1  # the last token may merge with the text after it: the model writes it
    appended = new_ids[keep - start : min(end, max_output - start)]
    if not appended:
        return None
    special = matcher.grammar.vocab.special_set | matcher.grammar.vocab.eos_set
    if any(t in special for t in appended):
        return None
    dropped = out[keep:]
    matcher.rollback(len(dropped))
    for i, token in enumerate(appended):
        if not matcher.accept_token(token):  # restore the matcher as it was
            matcher.rollback(i)
            for old in dropped:
                matcher.accept_token(old)
            return None
    req.output_ids = out[:keep] + appended
    return Jump(keep, len(appended))


def _decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
