"""How many prompt tokens a request holds in the engine: counted with the model's own tokenizer where
the served folder has one, estimated from bytes where it has none.

The gate's protection promise is only as good as this count. Measured against the real SGLang engine
with a trained BPE tokenizer, the bytes/4 estimate counted 2,380 prompt tokens where the engine counted
4,206 (per request 0.35-0.91 of the truth), and the gate admitted requests that overflowed the cache.
So the gate and the simulator count the way SGLang does:

- text (`/generate` `text`, completions' `prompt`): the tokenizer's `encode(text)` with its special
  tokens (a BOS where the tokenizer's post-processor adds one), as SGLang's tokenizer manager does;
- chat `messages`: the model's chat template (`tokenizer_config.json`'s `chat_template`) rendered with
  a generation prompt, then encoded without special tokens, as `apply_chat_template` does. A template
  the counter cannot render (tools, a missing variable) falls back to the text of each message plus
  the estimate's per-message markers, so a client never gets an error the engine would not give;
- token ids are their own count.

`tokenizers` (Rust) and `jinja2` (a sandboxed environment, as transformers renders templates) are
light; transformers itself is not imported. Without a tokenizer, `ByteEstimate` counts bytes/4 and
learns a correction from the prompt token counts the engine reports (`meta_info.prompt_tokens`,
OpenAI `usage.prompt_tokens`): the ratio of reported to estimated tokens, averaged over recent answers.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Protocol

from kvant_runtime.tokens import CHAT_TOKENS_PER_MESSAGE, estimate_text_tokens, message_text

log = logging.getLogger("kvant.tokens")

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# The learned correction of the bytes estimate: an average over about this many answers, within bounds
# that keep one odd answer (a prompt of emoji, a JSON blob) from swinging admission far.
CORRECTION_WEIGHT = 1 / 32
CORRECTION_BOUNDS = (0.5, 4.0)
# Texts longer than this are encoded without holding the GIL (ModelTokenizer._count).
LONG_TEXT_CHARS = 4096


class PromptCounter(Protocol):
    exact: bool  # the model's tokenizer: the engine counts the same

    def text(self, text: str) -> int: ...

    def chat(self, messages: list[Any]) -> int: ...

    def learn(self, counted: int, reported: int) -> None:
        """The engine reported `reported` prompt tokens for a prompt this counter counted `counted`."""


class TokenizerError(ValueError):
    """The served folder's tokenizer cannot be loaded; the message names the file."""


class ByteEstimate:
    """bytes/4 per text, plus markers per chat message, scaled by what the engine reports."""

    exact = False

    def __init__(self) -> None:
        self.scale = 1.0

    def text(self, text: str) -> int:
        return math.ceil(estimate_text_tokens(text) * self.scale)

    def chat(self, messages: list[Any]) -> int:
        raw = sum(CHAT_TOKENS_PER_MESSAGE + estimate_text_tokens(_text_of(m)) for m in messages)
        return math.ceil(raw * self.scale)

    def learn(self, counted: int, reported: int) -> None:
        if counted <= 0 or reported <= 0:
            return
        unscaled = counted / self.scale
        ratio = min(max(reported / unscaled, CORRECTION_BOUNDS[0]), CORRECTION_BOUNDS[1])
        self.scale += (ratio - self.scale) * CORRECTION_WEIGHT


class ModelTokenizer:
    """The served model's own tokenizer and chat template."""

    exact = True

    def __init__(self, folder: Path) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415
        from tokenizers import Tokenizer  # noqa: PLC0415

        path = folder / TOKENIZER_FILE
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises its own Exception subclass for a bad file
            raise TokenizerError(f"cannot load the tokenizer {path}: {error}") from None
        config = _read_config(folder / TOKENIZER_CONFIG)
        self._specials = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token")}
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: SGLang uses the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise
        self._template = environment.from_string(template) if isinstance(template, str) else None

    def text(self, text: str) -> int:
        return self._count(text, special_tokens=True)

    def chat(self, messages: list[Any]) -> int:
        if self._template is not None:
            try:
                rendered = self._template.render(
                    messages=messages, add_generation_prompt=True, **self._specials
                )
                return self._count(rendered, special_tokens=False)
            except Exception as error:  # a template that needs what the gate does not pass (tools, dates)
                log.debug("event=chat_template_fallback error=%r", error)
        return sum(CHAT_TOKENS_PER_MESSAGE + self.text(_text_of(m)) for m in messages)

    def learn(self, counted: int, reported: int) -> None:
        return  # exact: nothing to learn

    def _count(self, text: str, special_tokens: bool) -> int:
        if len(text) <= LONG_TEXT_CHARS:
            return len(self._tokenizer.encode(text, add_special_tokens=special_tokens).ids)
        # `encode` holds the GIL for its whole run (measured: 0.7 s for 40K tokens on a loaded 2-core
        # machine, every other thread stalled); `encode_batch` releases it, so the gate's event loop
        # keeps relaying while a worker thread counts a long prompt.
        (found,) = self._tokenizer.encode_batch([text], add_special_tokens=special_tokens)
        return len(found.ids)


def load_counter(folder: Path | None) -> PromptCounter:
    """The model's tokenizer when `folder` has one, else the bytes estimate."""
    if folder is not None and (folder / TOKENIZER_FILE).is_file():
        return ModelTokenizer(folder)
    return ByteEstimate()


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise TokenizerError(f"cannot read {path}: {error}") from None
    return config if isinstance(config, dict) else {}


def _token_text(token: object) -> str:
    if isinstance(token, dict):  # an AddedToken written out: {"content": "<s>", ...}
        return str(token.get("content", ""))
    return token if isinstance(token, str) else ""


def _text_of(message: object) -> str:
    return message_text(message) if isinstance(message, dict) else str(message)


def _raise(message: str) -> None:
    raise ValueError(message)
