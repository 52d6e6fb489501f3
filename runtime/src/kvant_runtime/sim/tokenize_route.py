"""The simulator's `/v1/tokenize`: SGLang's route, as the gate asks it for a prompt's count.

The gate asks the engine to count every chat prompt (gate/engine_count.py); on the simulator the answer
comes from the same counter the simulator holds the request at (`request_cost.prompt_tokens`, which
renders a chat request as SGLang's chat path does: `kvant_runtime.chat_render`), so a simulated
request is reserved at what it then holds. A media part is refused as SGLang refuses it for a model
that reads only text. The simulator has no token ids to give, so `tokens` is empty (SGLang's has them).
"""

from __future__ import annotations

from typing import Any

from kvant_runtime.prompt_counter import PromptCounter
from kvant_runtime.request_cost import prompt_tokens, refuse_media_for_text_model


def tokenize_answer(body: dict[str, Any], counter: PromptCounter, context_length: int) -> dict[str, Any]:
    """SGLang's answer to a `/v1/tokenize` body: `messages` rendered as a chat completion would be, or
    `prompt` (a text or a list of texts). Raises ValueError (400) as SGLang does."""
    if (body.get("messages") is None) == (body.get("prompt") is None):
        raise ValueError("give exactly one of 'messages' and 'prompt'")
    count: int | list[int]
    if body.get("messages") is not None:
        refuse_media_for_text_model(body)
        count = prompt_tokens(body, counter)[0]  # the messages and their options
    elif isinstance(body["prompt"], list):
        count = [counter.text(str(text)) for text in body["prompt"]]
    else:
        count = counter.text(str(body["prompt"]))
    return {"tokens": [], "count": count, "max_model_len": context_length}
