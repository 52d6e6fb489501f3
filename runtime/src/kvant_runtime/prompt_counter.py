"""How many prompt tokens a request holds in the engine: counted with the model's own tokenizer where
the served folder has one, estimated from bytes where it has none.

The gate's protection promise is only as good as this count. Measured against the real SGLang engine
with a trained BPE tokenizer, the bytes/4 estimate counted 2,380 prompt tokens where the engine counted
4,206 (per request 0.35-0.91 of the truth), and the gate admitted requests that overflowed the cache.
So the gate and the simulator count the way SGLang does:

- text (`/generate` `text`, completions' `prompt`): the tokenizer's `encode(text)` with its special
  tokens (a BOS where the tokenizer's post-processor adds one), as SGLang's tokenizer manager does;
- chat requests: the model's chat template (`chat_template.jinja` in the folder, else
  `tokenizer_config.json`'s `chat_template`; a named set picks `tool_use` for a request with tools,
  else `default`) rendered with everything SGLang hands it (`kvant_runtime.chat_render`: the tools as
  SGLang dumps them, reasoning effort and thinking switches, `chat_template_kwargs`), in an
  environment built as transformers builds it (its `tojson`, `raise_exception` and `strftime_now`,
  loop controls, the `generation` block), with the tokenizer's special tokens, then encoded without
  special tokens, as `apply_chat_template` does. A template that still fails (SGLang retries with the
  tools as bare functions, and so does this) falls back to the text of each message plus the
  estimate's per-message markers, so a client never gets an error from the gate the engine would
  not give;
- token ids are their own count.

The gate asks the engine first (`gate/engine_count.py`): this counter is its fallback, and the
simulator's. The tokenizer is loaded as SGLang loads it (`tokenizer_files`). Without a tokenizer,
`ByteEstimate` counts bytes/4 (a chat's tools by their JSON) and learns a correction from the prompt
token counts the engine reports (`meta_info.prompt_tokens`, OpenAI `usage.prompt_tokens`): the ratio
of reported to estimated tokens, averaged over recent answers, for text and chat prompts apart.
See docs/concepts/admission.md ("Prompt tokens").
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import jinja2
from jinja2 import Template, nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvant_runtime.chat_render import ChatRender, chat_render, template_content_format
from kvant_runtime.tokenizer_files import (
    SPECIAL_TOKENS,
    TOKENIZER_CONFIG,
    Encoder,
    TokenizerError,
    load_encoder,
)
from kvant_runtime.tokens import CHAT_TOKENS_PER_MESSAGE, estimate_text_tokens, message_text

log = logging.getLogger("kvant.tokens")

CHAT_TEMPLATE_FILE = "chat_template.jinja"
# The learned correction of the bytes estimate: an average over about this many answers, within bounds
# that keep one odd answer (a prompt of emoji, a JSON blob) from swinging admission far.
CORRECTION_WEIGHT = 1 / 32
CORRECTION_BOUNDS = (0.5, 4.0)
SHAPES = ("text", "chat")  # request shapes the estimate learns a correction for, each its own


class PromptCounter(Protocol):
    exact: bool  # the model's tokenizer: the engine counts the same

    def text(self, text: str) -> int: ...

    def chat(self, payload: dict[str, Any]) -> int:
        """The prompt tokens of a chat request (`messages` and what else reaches its template)."""

    def learn(self, counted: int, reported: int, shape: str = "text") -> None:
        """The engine reported `reported` prompt tokens for a prompt of `shape` ("text" or "chat") this
        counter counted `counted`."""


class ByteEstimate:
    """bytes/4 per text, plus markers per chat message, scaled by what the engine reports: a scale per
    request shape, since a template's markers and tools err otherwise than prose does."""

    exact = False

    def __init__(self) -> None:
        self.scales = dict.fromkeys(SHAPES, 1.0)

    def text(self, text: str) -> int:
        return math.ceil(estimate_text_tokens(text) * self.scales["text"])

    def chat(self, payload: dict[str, Any]) -> int:
        messages = payload.get("messages") or []
        raw = sum(CHAT_TOKENS_PER_MESSAGE + estimate_text_tokens(_text_of(m)) for m in messages)
        tools = chat_render(payload).tools  # rendered into the prompt: their JSON's bytes at least
        raw += estimate_text_tokens(json.dumps(tools)) if tools else 0
        return math.ceil(raw * self.scales["chat"])

    def learn(self, counted: int, reported: int, shape: str = "text") -> None:
        if counted <= 0 or reported <= 0 or shape not in self.scales:
            return
        scale = self.scales[shape]
        ratio = min(max(reported / (counted / scale), CORRECTION_BOUNDS[0]), CORRECTION_BOUNDS[1])
        self.scales[shape] = scale + (ratio - scale) * CORRECTION_WEIGHT


class ModelTokenizer:
    """The served model's own tokenizer and chat template."""

    exact = True

    def __init__(
        self, folder: Path, *, trust_remote_code: bool = False, encoder: Encoder | None = None
    ) -> None:
        found = encoder or load_encoder(folder, trust_remote_code=trust_remote_code)
        if found is None:
            raise TokenizerError(f"{folder} holds no tokenizer")
        self._encoder = found
        config = _read_config(folder / TOKENIZER_CONFIG)
        self._specials = {k: text for k in SPECIAL_TOKENS if (text := _token_text(config.get(k)))}
        self._specials.update(found.special_tokens())
        self._templates = _templates(folder, config)

    def text(self, text: str) -> int:
        return self._count(text, special_tokens=True)

    def chat(self, payload: dict[str, Any]) -> int:
        messages = payload.get("messages") or []
        template = self._template_for(payload)
        if template is not None:
            render = chat_render(payload, template.content_format)
            # SGLang retries a template that fails with the tools as bare functions (Mistral-style).
            flat = [t["function"] for t in render.tools] if render.tools else None
            for tools in (render.tools, flat) if render.tools else (None,):
                try:
                    rendered = template.compiled.render(
                        messages=render.messages,
                        tools=tools,
                        documents=None,
                        add_generation_prompt=render.add_generation_prompt,
                        **{**self._specials, **render.template_kwargs},
                    )
                    return self._count(rendered, special_tokens=False) + self._prefix(render)
                except Exception as error:  # a template error: the engine answers it, not the gate
                    log.debug("event=chat_template_fallback error=%r", error)
        return sum(CHAT_TOKENS_PER_MESSAGE + self.text(_text_of(m)) for m in messages)

    def _prefix(self, render: ChatRender) -> int:
        """The tokens of a continued assistant message, encoded as SGLang appends them: with the
        tokenizer's special tokens, less a leading BOS."""
        if not render.assistant_prefix:
            return 0
        ids = self._encoder.ids(render.assistant_prefix, special_tokens=True)
        bos = self._encoder.token_id(self._specials.get("bos_token", ""))
        return len(ids) - (1 if ids and bos is not None and ids[0] == bos else 0)

    def _template_for(self, payload: dict[str, Any]) -> ChatTemplate | None:
        if "tool_use" in self._templates and payload.get("tools"):
            return self._templates["tool_use"]
        return self._templates.get("default")

    def learn(self, counted: int, reported: int, shape: str = "text") -> None:
        return  # exact: nothing to learn

    def _count(self, text: str, special_tokens: bool) -> int:
        return self._encoder.count(text, special_tokens)


@dataclass(frozen=True)
class ChatTemplate:
    compiled: Template
    content_format: str  # "string" or "openai" (chat_render.template_content_format)


def _templates(folder: Path, config: dict[str, Any]) -> dict[str, ChatTemplate]:
    """The model's chat templates by name ("default", and "tool_use" where it has one), as transformers
    finds them: `chat_template.jinja` over `tokenizer_config.json`'s `chat_template` (one string, or a
    list of named ones)."""
    sources: dict[str, str] = {}
    found = config.get("chat_template")
    if isinstance(found, str):
        sources["default"] = found
    elif isinstance(found, list):
        sources = {t["name"]: t["template"] for t in found if isinstance(t, dict) and "name" in t}
    jinja_file = folder / CHAT_TEMPLATE_FILE
    if jinja_file.is_file():
        try:
            sources["default"] = jinja_file.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise TokenizerError(f"cannot read {jinja_file}: {error}") from None
    environment = _template_environment()
    templates = {}
    for name, source in sources.items():
        try:
            templates[name] = ChatTemplate(environment.from_string(source), template_content_format(source))
        except jinja2.TemplateError as error:  # the engine would fail to start on it; count without
            log.warning("event=chat_template_unusable name=%s error=%r", name, error)
    return templates


def _template_environment() -> jinja2.Environment:
    """A sandbox set up as transformers sets up its chat templates' (`_compile_jinja_template`)."""
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise
    environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return environment


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' `tojson`: plain `json.dumps` (Jinja's own escapes HTML characters)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}`: transformers marks assistant text with it; rendered as
    its body."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it a plain set)

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


def load_counter(folder: Path | None, *, trust_remote_code: bool = False) -> PromptCounter:
    """The model's tokenizer when `folder` has one (loaded as SGLang loads it, with the repository's
    own code only when the engine trusts it), else the bytes estimate."""
    if folder is None:
        return ByteEstimate()
    encoder = load_encoder(folder, trust_remote_code=trust_remote_code)
    return ByteEstimate() if encoder is None else ModelTokenizer(folder, encoder=encoder)


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
