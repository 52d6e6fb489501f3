"""The bytes estimate of prompt tokens, for a served folder with no tokenizer.

Where the served folder has the model's tokenizer, the gate and the simulator count with it
(`kvant_runtime.prompt_counter.ModelTokenizer`), as SGLang does. Without one they estimate:

- text: one token per 4 UTF-8 bytes, rounded up. Close to large BPE vocabularies on English prose,
  but a small vocabulary, code or JSON can hold twice that (measured against the real engine: 0.35-0.91
  of the truth per request with a small trained tokenizer), so the gate scales it by what the engine
  reports (`prompt_counter.ByteEstimate`);
- chat `messages`: the text rule on each message's text content, plus `CHAT_TOKENS_PER_MESSAGE` for
  the role markers a chat template adds.

What a whole request costs (batches, parallel samples, the output limit in every form SGLang reads)
is `kvant_runtime.request_cost`; `DEFAULT_MAX_NEW_TOKENS` is SGLang's own default for `/generate`'s
`max_new_tokens`. `ESTIMATE_HEADROOM` is the share of the KV cache the gate leaves unreserved for what
its counts leave out, the prompt count's error among them; a larger error shows up as retractions,
which the gate's local loop answers by lowering its concurrency. What a request reserves of its output
depends on the admission mode: see docs/concepts/admission.md ("What a request reserves").
"""

from __future__ import annotations

from typing import Any

BYTES_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4
DEFAULT_MAX_NEW_TOKENS = 128
ESTIMATE_HEADROOM = 0.05


def estimate_text_tokens(text: str) -> int:
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


def message_text(message: dict[str, Any]) -> str:
    """The text of one chat message; `content` is a string or a list of `{type: text, text}` parts."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))
