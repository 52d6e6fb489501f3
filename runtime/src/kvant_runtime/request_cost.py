"""What a generating request may make the engine hold, so the gate reserves at least that.

Every request shape SGLang accepts is costed, not only the simple one:
- batches: `text`, `prompt`, `input` or `input_ids` as a list of prompts, each costed;
- parallel samples: `n` (OpenAI), `sampling_params.n` and `parallel_sample_num` (SGLang); the prompt
  is held once (the radix cache shares it between samples) and each sample grows its own output;
- the output limit in every name SGLang reads (`sampling_params.max_new_tokens`,
  `max_completion_tokens`, `max_tokens`, `max_output_tokens`) and in the numeric forms its pydantic
  models accept: an integer, a whole float (`3000.0`) or a string of digits (`"3000"`);
- no output limit at all: an OpenAI-style request would then generate up to the context length, so
  the gate reserves the model's `defaultMaxTokens` and writes that limit into the forwarded request,
  so the engine can never grow past what was reserved;
- embeddings and scoring hold their prompts only.

Given the request's engine `priority` (its class, `kvant_contracts.tenancy.ENGINE_PRIORITY`), the
forwarded body carries that value in SGLang's `priority` field on every route that reads one, over
whatever the client wrote, so no client sets its own place in the engine's queue.

Prompt tokens are counted by a `PromptCounter` (`kvant_runtime.prompt_counter`): the model's own
tokenizer and chat template where the served folder has them, else the bytes estimate with a learned
correction. A body the gate cannot read as JSON is costed by its size plus `defaultMaxTokens` and
passed to the engine to judge.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from kvant_runtime.image_tokens import ImageProcessor
from kvant_runtime.prompt_counter import ByteEstimate, PromptCounter
from kvant_runtime.tokens import BYTES_PER_TOKEN, DEFAULT_MAX_NEW_TOKENS

# Routes whose requests hold only their prompt: nothing is generated.
PROMPT_ONLY_PATHS = frozenset(
    {"/v1/embeddings", "/encode", "/classify", "/v1/classify", "/v1/rerank", "/v1/score"}
)
# Where the output limit goes when a request names none (SGLang's own field for each API).
_LIMIT_FIELD = {
    "/v1/completions": "max_tokens",
    "/v1/chat/completions": "max_tokens",
    "/v1/responses": "max_output_tokens",
    "/v1/messages": "max_tokens",
}
_OPENAI_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# Routes whose request SGLang 0.5.23 gives a `priority` field (io_struct.py, openai/protocol.py).
PRIORITY_PATHS = frozenset(
    {"/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/encode"}
)


class BadRequest(ValueError):
    """A request the engine would refuse too; the gate answers 400 with this message."""


# Content parts SGLang 0.5.23 hands to a multimodal processor (`_MEDIA_CONTENT_PART_TYPES`); a model
# that reads only text refuses a request holding one (`OpenAIServingChat._validate_media_content`).
MEDIA_PART_TYPES = frozenset({"image_url", "input_image", "video_url", "audio_url", "input_audio"})


def refuse_media_for_text_model(payload: dict[str, Any]) -> None:
    """SGLang's refusal of a media part for a text-only model, word for word, naming the part."""
    for message in payload.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in MEDIA_PART_TYPES:
                raise BadRequest(
                    f"Model only supports text input; received unsupported content type '{kind}'."
                )


@dataclass(frozen=True)
class Cost:
    tokens: int  # KV tokens the engine may hold for this request at most
    body: bytes  # what to forward: the request, its output limit written in when it had none, and
    # the engine priority when one was given
    prompt_tokens: int = 0  # of which: its prompts
    sequences: int = 0  # and this many sequences (prompts x samples), each growing up to `limit`
    limit: int = 0
    counted: bool = False  # the prompt was text or messages the counter counted (not token ids)
    shape: str = "text"  # "chat" for messages: the counter learns a correction per shape


def cost_request(
    path: str,
    body: bytes,
    default_max_tokens: int,
    counter: PromptCounter | None = None,
    priority: int | None = None,
    *,
    engine_counts: list[int] | None = None,
    images: ImageProcessor | None = None,
) -> Cost:
    """`engine_counts`: the engine's own count of each of the request's prompts (gate/engine_count.py),
    used instead of `counter`. `images`: the model's image processor, for the tokens its image parts
    become beyond their placeholder (kvant_runtime.image_tokens); None for a model that reads text."""
    try:
        payload = json.loads(body) if body.strip() else {}
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        # Not a JSON object (a multipart upload, a malformed body): cost it by size; the engine judges.
        prompt = -(-len(body) // BYTES_PER_TOKEN)
        return Cost(prompt + default_max_tokens, body, prompt, 1, default_max_tokens)
    counter = counter or ByteEstimate()
    prompts = engine_counts if engine_counts is not None else prompt_tokens(payload, counter)
    # Counted by the gate's counter, which may then learn from the engine's report; not when the
    # prompt was token ids or the engine counted it.
    counted = not _token_ids(payload) and engine_counts is None
    pictured = images.reserve(payload) if images is not None and prompts else 0
    if pictured:  # the images' tokens: not the counter's to learn from
        prompts, counted = [prompts[0] + pictured, *prompts[1:]], False
    parallel = samples(payload)
    written = _with_priority(path, payload, priority)
    shape = "chat" if "messages" in payload else "text"
    if path in PROMPT_ONLY_PATHS:
        return Cost(sum(prompts), _forwarded(written, body), sum(prompts), 0, 0, counted, shape)
    limit = output_limit(payload)
    if limit is None:
        limit, with_limit = _with_limit(path, written or payload, default_max_tokens)
        written = with_limit or written
    sequences = len(prompts) * parallel
    held = sum(prompts) + sequences * limit
    return Cost(held, _forwarded(written, body), sum(prompts), sequences, limit, counted, shape)


def _forwarded(written: dict[str, Any] | None, body: bytes) -> bytes:
    """The body to forward: the client's own bytes unless the gate wrote a field into it."""
    return body if written is None else json.dumps(written).encode()


def _with_priority(path: str, payload: dict[str, Any], priority: int | None) -> dict[str, Any] | None:
    """`payload` with `priority` in SGLang's field (a copy), or None when it carries that already or
    none is given. A route without the field gets it only to overwrite a client's own."""
    if priority is None or payload.get("priority") == priority:
        return None
    if path not in PRIORITY_PATHS and "priority" not in payload:
        return None
    return {**payload, "priority": priority}


def prompt_tokens(payload: dict[str, Any], counter: PromptCounter | None = None) -> list[int]:
    """One entry per prompt of the request (a batch has several)."""
    counter = counter or ByteEstimate()
    for key in ("input_ids", "text", "prompt", "input"):
        value = payload.get(key)
        if isinstance(value, list) and value and all(isinstance(item, list | str) for item in value):
            return [_one_prompt(item, counter) for item in value]
    if "input_ids" in payload and payload.get("input_ids") is not None:
        return [_one_prompt(payload["input_ids"], counter)]
    if "messages" in payload:
        messages = payload["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("the prompt cannot be read: messages must be a list of objects")
        try:
            return [counter.chat(payload)]
        except (TypeError, AttributeError) as err:
            raise BadRequest(f"the prompt cannot be read: {err}") from None
    for key in ("text", "prompt", "input"):
        if key in payload:
            return [_one_prompt(payload[key] if payload[key] is not None else "", counter)]
    return [0]  # no prompt field: /health_generate, or a shape the engine will refuse


def _token_ids(payload: dict[str, Any]) -> bool:
    """Whether the prompts are token ids, which count themselves exactly."""
    if isinstance(payload.get("input_ids"), list):
        return True
    prompt = payload.get("prompt", payload.get("text"))
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(p, int | list) for p in prompt)


def _one_prompt(item: object, counter: PromptCounter) -> int:
    if isinstance(item, str):
        return counter.text(item)
    if isinstance(item, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
        return len(item)
    if isinstance(item, list):  # Responses-API style input: a list of message-like items
        return sum(counter.text(json.dumps(part)) for part in item)
    raise BadRequest(f"a prompt must be text or a list of token ids, got {type(item).__name__}")


def samples(payload: dict[str, Any]) -> int:
    sampling = _sampling(payload)
    values = [payload.get("n"), payload.get("parallel_sample_num"), sampling.get("n")]
    found = [_whole("n", v) for v in values if v is not None]
    samples = max(found, default=1)
    if samples < 1:
        raise BadRequest(f"n must be at least 1, got {samples}")
    return samples


def output_limit(payload: dict[str, Any]) -> int | None:
    sampling = _sampling(payload)
    if sampling.get("max_new_tokens") is not None:
        return _whole("sampling_params.max_new_tokens", sampling["max_new_tokens"])
    for name in _OPENAI_LIMITS:
        if payload.get(name) is not None:
            return _whole(name, payload[name])
    return None


def _sampling(payload: dict[str, Any]) -> dict[str, Any]:
    """`sampling_params`, or for a batch with one per prompt the largest of each field."""
    sampling = payload.get("sampling_params") or {}
    if isinstance(sampling, list):
        merged: dict[str, Any] = {}
        for params in sampling:
            if not isinstance(params, dict):
                raise BadRequest("sampling_params must be an object or a list of objects")
            for key in ("max_new_tokens", "n"):
                if params.get(key) is not None:
                    merged[key] = max(_whole(key, params[key]), merged.get(key, 0))
        return merged
    if not isinstance(sampling, dict):
        raise BadRequest("sampling_params must be an object or a list of objects")
    return sampling


def _whole(name: str, value: object) -> int:
    """An integer in any form SGLang's pydantic models accept for one: 3000, 3000.0 or "3000"."""
    number: float
    if isinstance(value, bool):
        raise BadRequest(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("+").isdigit():
        number = int(value.strip())
    else:
        raise BadRequest(f"{name} must be a whole number, got {value!r}")
    if not math.isfinite(number) or number != int(number) or number < 0:
        raise BadRequest(f"{name} must be a whole number ≥ 0, got {value!r}")
    return int(number)


def _with_limit(path: str, payload: dict[str, Any], default: int) -> tuple[int, dict[str, Any] | None]:
    """The output limit to reserve for a request that names none, and the payload with it written in
    (None: forwarded as it is)."""
    if path == "/generate":
        # SGLang's /generate stops at its own default (128), so the request is bounded as it is.
        sampling = dict(payload.get("sampling_params") or {})
        if isinstance(payload.get("sampling_params"), list):
            return DEFAULT_MAX_NEW_TOKENS, None
        sampling["max_new_tokens"] = DEFAULT_MAX_NEW_TOKENS
        return DEFAULT_MAX_NEW_TOKENS, {**payload, "sampling_params": sampling}
    field = _LIMIT_FIELD.get(path)
    if field is None:  # an API whose limit field the gate does not write: reserve, forward as is
        return default, None
    return default, {**payload, field: default}
