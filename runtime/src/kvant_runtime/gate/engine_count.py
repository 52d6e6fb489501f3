"""Chat prompts counted by the engine that will serve them: SGLang's own `/v1/tokenize`.

Before SGLang counts a chat request it renders it through its whole chat path: the tools as it dumps
them (filtered by `tool_choice`, none for "none"), `reasoning_effort` and the thinking switches it
derives from it, `chat_template_kwargs` over the server's `--default-chat-template-kwargs`, list
content flattened for string templates, tool results joined, model-specific encoders (Kimi K3,
DeepSeek V3.2), and the tokenizer as SGLang loads it (remote code included, where the engine runs with
`--trust-remote-code`). A counter of the gate's own can follow most of that, never all of it.
SGLang's `/v1/tokenize` runs the same function on a chat body (`_process_messages`, as
`/v1/chat/completions` does) and answers the count, so the gate asks it, over the pod's loopback,
for every chat request before it reserves. What the answer leaves out is multimodal expansion: the
engine's image processor runs on a real request only, so for a model that reads images the count
holds each image's placeholder, not its tokens; the gate adds those itself (`image_tokens`).

A media part for a model that reads only text is refused by the engine in the same call (400,
"Model only supports text input; received unsupported content type 'image_url'"), and the gate
passes that refusal on: it never fetches a URL itself.

Text prompts (`/generate`'s `text`, `/v1/completions`' `prompt`, one or a batch) are the gate's own
to count where the served folder has `tokenizer.json` (exact, and no call). Where it has none (a
SentencePiece-only or tiktoken tokenizer, a repository's own tokenizer code), the gate asks the
engine for them too, rather than estimate from bytes.

When the engine does not answer within `ENGINE_COUNT_SECONDS`, or answers anything but 200 or 400 (a
busy engine, an SGLang before 0.5.23 without the route), the gate counts with its own counter
(`kvant_runtime.prompt_counter`), and `kvant_gate_prompt_counts_total{by="gate"}` says how often.
The simulator serves `/v1/tokenize` from that same counter, so on it both paths agree by design.
"""

from __future__ import annotations

import json
import logging

import aiohttp

log = logging.getLogger("kvant.gate")

CHAT_PATH = "/v1/chat/completions"
TOKENIZE_PATH = "/v1/tokenize"
# A loopback call to a tokenizer: milliseconds (bench/gate/token_count.py). Past this the engine's
# frontend is stalled, and the gate's own count is the better answer than a longer wait.
ENGINE_COUNT_SECONDS = 2.0


class EngineRefused(ValueError):
    """The engine refused the chat request's prompt (it would refuse the request too): its message."""


# Where a text route keeps its prompt: one text, or a batch of them.
TEXT_FIELDS = {"/generate": "text", "/v1/completions": "prompt"}


async def engine_prompt_tokens(
    session: aiohttp.ClientSession, upstream: str, path: str, body: bytes, *, texts_too: bool
) -> list[int] | None:
    """The engine's count of each prompt of a request to `path` (a chat request's one, or each text of
    a text route's batch when `texts_too`); None when it is not asked or cannot say (the caller counts
    by itself). Raises EngineRefused with the engine's message on its 400."""
    if path == CHAT_PATH:
        count = await _tokenize(session, upstream, body)
        return [count] if isinstance(count, int) else None
    field = TEXT_FIELDS.get(path)
    if field is None or not texts_too:
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    prompt = payload.get(field) if isinstance(payload, dict) else None
    texts = isinstance(prompt, list) and bool(prompt) and all(isinstance(p, str) for p in prompt)
    if not (isinstance(prompt, str) or texts):
        return None  # token ids count themselves; anything else is the engine's to refuse
    count = await _tokenize(session, upstream, json.dumps({"prompt": prompt}).encode())
    if isinstance(prompt, list):
        return count if isinstance(count, list) and len(count) == len(prompt) else None
    return [count] if isinstance(count, int) else None


async def _tokenize(session: aiohttp.ClientSession, upstream: str, body: bytes) -> int | list[int] | None:
    """POST `body` to the engine's /v1/tokenize: its `count`, or None."""
    timeout = aiohttp.ClientTimeout(total=ENGINE_COUNT_SECONDS)
    headers = {"Content-Type": "application/json"}
    try:
        async with session.post(upstream + TOKENIZE_PATH, data=body, headers=headers, timeout=timeout) as r:
            text = await r.text()
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as err:
        log.debug("event=engine_count_unavailable error=%r", err)
        return None
    if status == 400:
        raise EngineRefused(_message(text))
    if status != 200:
        log.debug("event=engine_count_unavailable status=%d", status)
        return None
    try:
        count = json.loads(text)["count"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(count, list):
        return count if all(_is_count(c) for c in count) else None
    return count if _is_count(count) else None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _message(text: str) -> str:
    """The engine's error message (SGLang answers {"object": "error", "message": ...})."""
    try:
        found = json.loads(text).get("message")
    except (ValueError, AttributeError):
        found = None
    return str(found or text or "the engine refused the prompt")[:1000]
