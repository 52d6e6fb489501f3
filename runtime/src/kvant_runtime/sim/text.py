"""Fake but valid output text: each token id is one word of a small made-up vocabulary."""

from __future__ import annotations

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "pa", "qu", "di", "fo", "gu", "hi", "jo")
# Two-syllable words: 256 distinct tokens, all printable ASCII.
VOCAB = tuple(a + b for a in _SYLLABLES for b in _SYLLABLES)
VOCAB_SIZE = len(VOCAB)


def detokenize(token_ids: list[int]) -> str:
    return "".join(" " + VOCAB[t] for t in token_ids)
