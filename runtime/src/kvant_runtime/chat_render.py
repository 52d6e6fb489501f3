"""What SGLang 0.5.23 hands a chat template for a chat request, read from its chat path.

The engine's own count is the gate's first choice (`gate/engine_count.py`). This module is the second:
the gate's counter when the engine cannot answer, and the simulator's, which stands in for the engine
and serves `/v1/tokenize` from it. It follows `OpenAIServingChat._process_messages` and
`_apply_jinja_template` for a text-only model rendered by its Jinja template (no named
`--chat-template`, no model-specific encoder such as Kimi K3's or DeepSeek V3.2's):

- messages: each message's fields without the ones that are null, `content` null becoming "";
  list content kept as parts for a template that loops over them ("openai" format, found as SGLang
  finds it: a `for` over `message.content`, or a template that mentions images), else joined with
  spaces from its text parts ("string" format); a tool message's all-text parts always joined;
- tools: each as SGLang's `Tool.model_dump()` leaves it (`_tool_dump`), all of them, only the one a
  `tool_choice` object names, or none for `tool_choice: "none"`;
- template keyword arguments: `reasoning_effort` when set, then `chat_template_kwargs`, into which a
  reasoning effort or `reasoning.enabled` writes `thinking` and `enable_thinking` unless the request
  set them (SGLang's `normalize_reasoning_inputs`);
- assistant tool calls as SGLang's `ToolCall.model_dump()` leaves them (`id` and `index` null where
  absent), their `arguments` parsed from JSON text into an object;
- a last assistant message with text content: turned into a user message, or with
  `continue_final_message` taken out and its text appended after the generation prompt, encoded
  without its leading BOS (`assistant_prefix`); a generation prompt always.

`response_format` never reaches the template: SGLang turns it into a grammar, which constrains the
answer and holds no prompt tokens. The server's `--default-chat-template-kwargs` are the engine's, and
only its own count sees them. `tests/unit/test_chat_counts_match_sglang.py` holds this module to
SGLang's own code on a corpus of templates.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import jinja2
import jinja2.nodes

# A media part as an "openai" template sees it: its placeholder (the URL goes to the processor).
MEDIA_PLACEHOLDERS = {
    "image_url": "image", "input_image": "image", "video_url": "video", "audio_url": "audio",
}  # fmt: skip
TEXT_PARTS = ("text", "input_text")
# SGLang's `Function` fields, in its order; a function's other keys never reach the template.
FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading")
# SGLang's chat message fields (`ChatCompletionMessageGenericParam`), in its order: the dict a template
# sees has these, without the null ones.
MESSAGE_FIELDS = (
    "role", "content", "tool_call_id", "name", "phase", "reasoning_content", "tool_calls", "tools", "prefix",
)  # fmt: skip
# SGLang's reasoning efforts that mean thinking is off.
NO_THINKING = "none"


@dataclass
class ChatRender:
    """The arguments a chat template is rendered with, besides the tokenizer's special tokens."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = True
    assistant_prefix: str | None = None  # encoded after the rendered prompt (continue_final_message)


def chat_render(payload: dict[str, Any], content_format: str = "string") -> ChatRender:
    """The render of a chat request's `payload` for a template of `content_format` ("string" or
    "openai", `template_content_format`)."""
    messages = [_message(m, content_format) for m in payload.get("messages") or [] if isinstance(m, dict)]
    prefix = None
    if messages and messages[-1].get("role") == "assistant" and isinstance(messages[-1].get("content"), str):
        if payload.get("continue_final_message"):
            prefix = messages.pop()["content"]
        else:
            messages[-1] = {"role": "user", "content": messages[-1]["content"]}
    return ChatRender(messages, _tools(payload), _template_kwargs(payload), assistant_prefix=prefix)


def template_content_format(template: str) -> str:
    """ "openai" when the template loops over a message's content parts (or mentions media), else
    "string": SGLang's `detect_jinja_template_content_format`."""
    if any(word in template for word in ("image", "audio", "video", "vision")):
        return "openai"
    try:
        tree = jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError:
        return "string"
    for loop in tree.find_all(jinja2.nodes.For):
        if any(_reads_content(loop.iter, name) for name in ("message", "msg", "m")):
            return "openai"
    return "string"


def _reads_content(node: jinja2.nodes.Node, name: str) -> bool:
    """`name.content`, `name['content']`, or either of them filtered (`| selectattr(...)`)."""
    if isinstance(node, jinja2.nodes.Filter) and node.node is not None:
        return _reads_content(node.node, name)
    if isinstance(node, jinja2.nodes.Getattr):
        return isinstance(node.node, jinja2.nodes.Name) and node.node.name == name and node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        key = node.arg
        return (
            isinstance(node.node, jinja2.nodes.Name)
            and node.node.name == name
            and isinstance(key, jinja2.nodes.Const)
            and key.value == "content"
        )
    return False


def _message(message: dict[str, Any], content_format: str) -> dict[str, Any]:
    out = {key: copy.deepcopy(message[key]) for key in MESSAGE_FIELDS if message.get(key) is not None}
    if isinstance(out.get("role"), str):
        out["role"] = out["role"].lower()
    if isinstance(out.get("tools"), list):
        out["tools"] = [_tool_dump(t) for t in out["tools"] if isinstance(t, dict)]
    if isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [_tool_call_dump(c) for c in out["tool_calls"] if isinstance(c, dict)]
    content = message.get("content")
    if content is None:
        out["content"] = ""
    elif isinstance(content, list):
        if out.get("role") == "tool" and all(_is_text(p) for p in content):
            out["content"] = " ".join(p if isinstance(p, str) else p.get("text", "") for p in content)
        elif content_format == "openai":
            out["content"] = [_part(p) for p in content if _part(p) is not None]
        else:
            texts = [p["text"] for p in content if isinstance(p, dict) and p.get("type") in TEXT_PARTS]
            out["content"] = " ".join(texts)
    return out


def _tool_call_dump(call: dict[str, Any]) -> dict[str, Any]:
    """An assistant's tool call as SGLang's `ToolCall.model_dump()` leaves it, its arguments parsed from
    JSON text into the object a template renders (`normalize_assistant_tool_call_arguments`; SGLang
    refuses arguments that are not a JSON object, and the engine's count says so)."""
    given = call.get("function")
    function: dict[str, Any] = given if isinstance(given, dict) else {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        arguments = parsed if isinstance(parsed, dict) else arguments
    return {
        "id": call.get("id"),
        "index": call.get("index"),
        "type": call.get("type", "function"),
        "function": {"name": function.get("name"), "arguments": arguments},
    }


def _is_text(part: object) -> bool:
    return isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text")


def _part(part: object) -> dict[str, Any] | None:
    """A content part as an "openai" template sees it: text kept, media as its placeholder."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in TEXT_PARTS:
        return {"type": "text", "text": part.get("text")}
    if kind in MEDIA_PLACEHOLDERS:
        return {"type": MEDIA_PLACEHOLDERS[kind]}
    if kind == "tool_reference":
        return dict(part)
    return None


def _tools(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = payload.get("tools")
    choice = payload.get("tool_choice")
    if not isinstance(tools, list) or not tools or choice == "none":
        return None
    if isinstance(choice, dict):  # {"type": "function", "function": {"name": ...}}: that one only
        name = (choice.get("function") or {}).get("name")
        named = [t for t in tools if isinstance(t, dict) and (t.get("function") or {}).get("name") == name]
        return [_tool_dump(t) for t in named] or None
    return [_tool_dump(t) for t in tools if isinstance(t, dict)]


def _tool_dump(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as SGLang's `Tool.model_dump()` leaves it: `type` ("function" by default); its function's
    known fields, those the client sent in the client's order, then `description` and `parameters` as
    null where it left them out (`strict` and `defer_loading` dropped when null; unknown keys dropped,
    as pydantic ignores them); then the tool's own `defer_loading` (null unless given)."""
    given = tool.get("function")
    function: dict[str, Any] = given if isinstance(given, dict) else {}
    fields = {key: function.get(key) for key in FUNCTION_FIELDS}
    if tool.get("defer_loading") is not None and fields["defer_loading"] is None:
        fields["defer_loading"] = tool["defer_loading"]
    for key in ("strict", "defer_loading"):
        if fields[key] is None:
            del fields[key]
    order = [key for key in function if key in fields]
    dumped = {key: fields[key] for key in [*order, *(k for k in fields if k not in order)]}
    kind = tool.get("type", "function")
    return {"type": kind, "function": dumped, "defer_loading": tool.get("defer_loading")}


def _template_kwargs(payload: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    given = payload.get("chat_template_kwargs")
    template_kwargs = dict(given) if isinstance(given, dict) else {}
    effort = payload.get("reasoning_effort")
    reasoning = payload.get("reasoning")
    thinking: bool | None = None
    if isinstance(reasoning, dict):
        if effort is None:
            effort = reasoning.get("effort", reasoning.get("reasoning_effort"))
        enabled = reasoning.get("enabled")
        if enabled is None:
            enabled = reasoning.get("enable", False)
        if isinstance(enabled, str):
            enabled = enabled.strip().lower() in {"1", "true", "yes", "y", "on"}
        if enabled:
            thinking = True
    if effort is not None:
        thinking = effort != NO_THINKING
        kwargs["reasoning_effort"] = effort
    if thinking is not None:
        template_kwargs.setdefault("thinking", thinking)
        template_kwargs.setdefault("enable_thinking", thinking)
    kwargs.update(template_kwargs)
    return kwargs
