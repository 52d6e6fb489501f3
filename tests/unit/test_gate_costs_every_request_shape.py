"""Every request shape is costed at least at what the engine may hold for it, and a request with no
output limit is given one, so the engine can never grow past what the gate reserved."""

from __future__ import annotations

import json

import pytest

from kvant_runtime.request_cost import BadRequest, cost_request
from kvant_runtime.tokens import DEFAULT_MAX_NEW_TOKENS, estimate_text_tokens

DEFAULT = 2048
PROMPT = "x" * 400  # 100 tokens by the estimate


def _cost(path: str, payload: object) -> int:
    return cost_request(path, json.dumps(payload).encode(), DEFAULT).tokens


def test_the_estimate_the_tests_rely_on() -> None:
    assert estimate_text_tokens(PROMPT) == 100


@pytest.mark.parametrize(
    ("path", "payload", "at_least"),
    [
        # n samples share the prompt (radix cache) and each grows its own output
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 1000, "n": 8}, 100 + 8 * 1000),
        ("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 1000, "n": 8}}, 100 + 8 * 1000),
        (
            "/generate",
            {"text": PROMPT, "parallel_sample_num": 4, "sampling_params": {"max_new_tokens": 10}},
            140,
        ),
        # batches: every prompt, and every prompt's output
        ("/generate", {"text": [PROMPT] * 100, "sampling_params": {"max_new_tokens": 1000}}, 100 * 1100),
        ("/generate", {"input_ids": [[1] * 50, [2] * 70], "sampling_params": {"max_new_tokens": 10}}, 140),
        ("/v1/completions", {"prompt": [PROMPT, PROMPT], "max_tokens": 10}, 220),
        ("/v1/completions", {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 10}, 25),
        (
            "/generate",
            {"text": [PROMPT, PROMPT], "sampling_params": [{"max_new_tokens": 5}, {"max_new_tokens": 900}]},
            2 * (100 + 900),
        ),
        # the numeric forms SGLang's pydantic models accept
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": "3000"},
            3100,
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 3000.0},
            3100,
        ),
        ("/v1/chat/completions", {"messages": [], "max_completion_tokens": 500, "max_tokens": 9}, 500),
        # no output limit: the model's default, which is also written into the request
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}, 100 + DEFAULT),
        ("/v1/responses", {"input": PROMPT}, 100 + DEFAULT),
        ("/generate", {"text": PROMPT}, 100 + DEFAULT_MAX_NEW_TOKENS),
        # prompt-only routes hold their prompts and generate nothing
        ("/v1/embeddings", {"input": [PROMPT, PROMPT, PROMPT]}, 300),
    ],
)
def test_each_shape_reserves_at_least_what_the_engine_may_hold(
    path: str, payload: dict, at_least: int
) -> None:
    assert _cost(path, payload) >= at_least


def test_a_request_without_a_limit_is_forwarded_with_the_reserved_one() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    cost = cost_request("/v1/chat/completions", json.dumps(chat).encode(), DEFAULT)
    assert json.loads(cost.body) == {**chat, "max_tokens": DEFAULT}
    generate = cost_request("/generate", b'{"text": "hi", "sampling_params": {"temperature": 0}}', DEFAULT)
    assert json.loads(generate.body)["sampling_params"] == {"temperature": 0, "max_new_tokens": 128}
    limited = json.dumps({"messages": [], "max_tokens": 7}).encode()
    assert cost_request("/v1/chat/completions", limited, DEFAULT).body == limited  # untouched


@pytest.mark.parametrize(
    "payload",
    [
        {"prompt": "hi", "max_tokens": -1},
        {"prompt": "hi", "max_tokens": True},
        {"prompt": "hi", "max_tokens": 2.5},
        {"prompt": "hi", "max_tokens": "lots"},
        {"prompt": "hi", "max_tokens": 1e400},
        {"prompt": "hi", "max_tokens": 5, "n": 0},
        {"prompt": {"not": "a prompt"}, "max_tokens": 5},
        {"text": "hi", "sampling_params": "fast"},
    ],
)
def test_a_request_the_engine_would_refuse_is_a_clear_400(payload: dict) -> None:
    with pytest.raises(BadRequest):
        cost_request("/v1/completions", json.dumps(payload).encode(), DEFAULT)


def test_a_body_that_is_not_json_is_costed_by_size_and_left_to_the_engine() -> None:
    body = b"--boundary\r\n" + b"a" * 4000
    cost = cost_request("/v1/audio/transcriptions", body, DEFAULT)
    assert cost.tokens >= len(body) // 4 + DEFAULT and cost.body == body


def test_the_engine_priority_is_written_over_the_clients_own() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "priority": 999}
    cost = cost_request("/v1/chat/completions", json.dumps(chat).encode(), DEFAULT, priority=1)
    # One body with both fields the gate writes: the class's priority and the output limit.
    assert json.loads(cost.body) == {**chat, "priority": 1, "max_tokens": DEFAULT}
    assert cost.tokens == cost_request("/v1/chat/completions", json.dumps(chat).encode(), DEFAULT).tokens
    # Every route that reads the field gets it, sent or not; others only lose a client's own.
    plain = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode()
    assert json.loads(cost_request("/generate", plain, DEFAULT, priority=0).body)["priority"] == 0
    messages = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    untouched = json.dumps(messages).encode()
    assert cost_request("/v1/messages", untouched, DEFAULT, priority=2).body == untouched
    claimed = json.dumps({**messages, "priority": 7}).encode()
    assert json.loads(cost_request("/v1/messages", claimed, DEFAULT, priority=2).body)["priority"] == 2
    # Already the class's value, or no class given: the client's bytes go on as they came.
    same = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}, "priority": 1}).encode()
    assert cost_request("/generate", same, DEFAULT, priority=1).body == same
    assert cost_request("/generate", plain, DEFAULT).body == plain
