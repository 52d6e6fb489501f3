"""The bytes estimate of prompt tokens (no tokenizer in the served folder), and output limits."""

from __future__ import annotations

import pytest

from kvant_runtime.request_cost import BadRequest, output_limit, prompt_tokens


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
    assert prompt_tokens(body) == [tokens]


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        ({"sampling_params": {"max_new_tokens": 9}}, 9),
        ({"max_completion_tokens": 7, "max_tokens": 3}, 7),
        ({"max_tokens": 3}, 3),
        ({}, None),  # none named: the caller decides (the gate reserves defaultMaxTokens)
    ],
)
def test_output_limit(body, tokens):
    assert output_limit(body) == tokens


def test_bad_lengths_are_refused_and_batches_counted_per_prompt():
    with pytest.raises(BadRequest, match="max_tokens must be a whole number"):
        output_limit({"max_tokens": "many"})
    with pytest.raises(BadRequest, match="messages must be a list of objects"):
        prompt_tokens({"messages": "hello"})
    assert prompt_tokens({"text": ["abcd", "abcdefgh"]}) == [1, 2]
