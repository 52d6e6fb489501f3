"""The token estimate shared by the engine simulator and the admission gate.

Neither has a tokenizer, so both count tokens with the same cheap rule and
therefore agree on what a request costs in KV:

- `input_ids` (SGLang `/generate`) or a token-id `prompt` (OpenAI completions):
  their length, which is exact;
- text: one token per 4 UTF-8 bytes, rounded up (close to BPE tokenizers on
  English; the gate only needs a stable, order-of-magnitude-right cost);
- chat `messages`: the text rule on each message's text content, plus
  `CHAT_TOKENS_PER_MESSAGE` for the role markers a chat template adds.

What a whole request costs (batches, parallel samples, the output limit in every
form SGLang reads) is `kvant_runtime.request_cost`; `DEFAULT_MAX_NEW_TOKENS` is
SGLang's own default for `/generate`'s `max_new_tokens`.

The text rule is typically within ±15 % of a BPE tokenizer on prose and can
under-count code or JSON by more. The gate reserves a request's whole
`max_new_tokens`, which the engine only reaches at the request's last token,
so only the prompt part of a reservation can be short. `ESTIMATE_HEADROOM` is
the share of the KV cache the gate leaves unreserved for that: a 15 %
under-count on prompts that fill a third of the cache. A larger error shows
up as engine token_usage above target or as retractions, which the gate's
local loop answers by lowering its concurrency.
"""

from __future__ import annotations

from typing import Any

BYTES_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
DEFAULT_MAX_NEW_TOKENS = 128
ESTIMATE_HEADROOM = 0.05


def estimate_text_tokens(text: str) -> int:
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """Tokens the prompt of a `/generate`, `/v1/completions` or `/v1/chat/completions` body occupies."""
    if isinstance(body.get("input_ids"), list):
        return len(body["input_ids"])
    if "messages" in body:
        return sum(CHAT_TOKENS_PER_MESSAGE + estimate_text_tokens(message_text(m)) for m in body["messages"])
    prompt = body.get("text", body.get("prompt", ""))
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if not isinstance(prompt, str):
        raise ValueError("the prompt must be a string or a list of token ids; batches are not supported")
    return estimate_text_tokens(prompt)


def message_text(message: dict[str, Any]) -> str:
    """The text of one chat message; `content` is a string or a list of `{type: text, text}` parts."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))
