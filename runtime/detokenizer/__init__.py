"""The detokenizer process and incremental decoding of token ids to text."""
