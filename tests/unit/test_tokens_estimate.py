"""The token estimate the simulator and the gate share."""

from __future__ import annotations

import pytest

from kvant_runtime.tokens import DEFAULT_MAX_NEW_TOKENS, estimate_prompt_tokens, requested_new_tokens


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        ({"input_ids": [1, 2, 3]}, 3),
        ({"text": "abcdefgh"}, 2),
        ({"text": "abcdefghi"}, 3),  # rounded up
        ({"prompt": "é" * 4}, 2),  # UTF-8 bytes, not characters
        ({"prompt": [5, 6, 7, 8, 9]}, 5),
        (
            {"messages": [{"role": "user", "content": "abcd"}, {"role": "user", "content": "ab"}]},
            4 + 1 + 4 + 1,
        ),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]}]}, 4 + 2),
    ],
)
def test_prompt_tokens(body, tokens):
    assert estimate_prompt_tokens(body) == tokens


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        ({"sampling_params": {"max_new_tokens": 9}}, 9),
        ({"max_completion_tokens": 7, "max_tokens": 3}, 7),
        ({"max_tokens": 3}, 3),
        ({}, DEFAULT_MAX_NEW_TOKENS),
    ],
)
def test_requested_new_tokens(body, tokens):
    assert requested_new_tokens(body) == tokens


def test_bad_lengths_and_batches_are_refused():
    with pytest.raises(ValueError, match="non-negative integer"):
        requested_new_tokens({"max_tokens": "many"})
    with pytest.raises(ValueError, match="batches are not supported"):
        estimate_prompt_tokens({"text": ["a", "b"]})
