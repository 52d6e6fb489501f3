"""The gate's own chat count (its fallback, and the simulator's count) against SGLang 0.5.23's own code.

A corpus of chat templates written here does what production templates do: tools rendered into the
system turn, a thinking switch, `strftime_now` with a system-prompt default, a template shipped as
its own `chat_template.jinja` file (over the one in tokenizer_config.json), a template that loops over
content parts, `reasoning_effort` read by the template, assistant tool calls and tool results. Each is
put beside the tiny chat model's byte-level BPE tokenizer (built here, nothing downloaded); the tools
template also beside a SentencePiece model without `tokenizer.json` and beside a tiktoken encoding
behind the repository's own tokenizer code (`tests/tokenizer_kinds.py`, trained here, loaded with
remote code trusted on both sides). Every request of the corpus is counted twice: by
`ModelTokenizer.chat` and by SGLang's own /v1/tokenize path, run in SGLang's environment by
`tests/sglang_chat_counts.py` (no weights, no network). They must be equal.

Needs SGLang's environment, which `make tools` builds (hack/engine-image.sh): marked `cluster`, so
`make unit` leaves it out and `make test` runs it.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kvant_dev.tinychat import ensure_tiny_chat_model
from kvant_dev.toolchain import ENGINE_ENVIRONMENT, built_environment
from kvant_runtime.prompt_counter import ModelTokenizer
from tests.tokenizer_kinds import sentencepiece_folder, tiktoken_folder

pytestmark = pytest.mark.cluster

HARNESS = Path(__file__).resolve().parents[1] / "sglang_chat_counts.py"

# Tools rendered into the system turn, one JSON object per line, and assistant tool calls as JSON.
TOOLS_TEMPLATE = """{{ bos_token }}
{%- if tools %}<|system|>
You may call these tools:
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}{{ eos_token }}
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls is defined %}<|assistant|>
{% for call in message.tool_calls %}<call>{{ call.function | tojson }}</call>{% endfor %}{{ eos_token }}
{% elif message.role == 'tool' %}<|tool|>
{{ message.content }}{{ eos_token }}
{% else %}<|{{ message.role }}|>
{{ message.content }}{{ eos_token }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

# Qwen3-style: thinking on unless the request turns it off.
THINKING_TEMPLATE = """{%- for message in messages %}<|{{ message.role }}|>
{{ message.content }}{{ eos_token }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}"""

# Llama-3.1-style: today's date and a default system prompt when the request has none.
DATED_TEMPLATE = """{{ bos_token }}
{%- set date_string = strftime_now("%d %b %Y") %}
{%- if messages[0].role == 'system' %}{% set system = messages[0].content %}{% set rest = messages[1:] %}
{%- else %}{% set system = 'You are a helpful assistant.' %}{% set rest = messages %}{% endif %}
<|system|>
Today Date: {{ date_string }}
{{ system }}{{ eos_token }}
{% for message in rest %}<|{{ message.role }}|>
{{ message.content }}{{ eos_token }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

# Loops over content parts (SGLang's "openai" content format).
PARTS_TEMPLATE = """{%- for message in messages %}<|{{ message.role }}|>
{% if message.content is string %}{{ message.content }}{% else %}
{%- for part in message.content %}{% if part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}
{%- endif %}{{ eos_token }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

# gpt-oss-style: the template reads the effort.
EFFORT_TEMPLATE = """<|system|>
Reasoning: {{ reasoning_effort | default('medium') }}{{ eos_token }}
{% for message in messages %}<|{{ message.role }}|>
{{ message.content }}{{ eos_token }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

TEMPLATES = {
    "tools": TOOLS_TEMPLATE,
    "thinking": THINKING_TEMPLATE,
    "dated": DATED_TEMPLATE,
    "parts": PARTS_TEMPLATE,
    "effort": EFFORT_TEMPLATE,
}


def _tool(i: int, described: bool = True) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": f"lookup_{i}",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look up, in plain words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                "fields": {"type": "array", "items": {"type": "string", "enum": ["title", "body", "date"]}},
            },
            "required": ["query"],
        },
    }
    if described:
        function = {"description": f"Looks up records of kind {i} in the archive. " * 6, **function}
    return {"type": "function", "function": function}


# About 2,000 tokens of tool definitions, as an agent sends with every call.
MANY_TOOLS = [_tool(i) for i in range(8)]
USER = {"role": "user", "content": "Find the last three reports about the harbour."}
REQUESTS: list[dict[str, Any]] = [
    {"messages": [USER]},
    {
        "messages": [
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": [{"type": "text", "text": "Name a fish."}]},
            {"role": "assistant", "content": "Hake."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Another"}, {"type": "text", "text": "one?"}],
            },
        ]
    },
    {"messages": [USER], "tools": MANY_TOOLS},
    {"messages": [USER], "tools": [_tool(0, described=False)], "tool_choice": "auto"},
    {"messages": [USER], "tools": MANY_TOOLS, "tool_choice": "none"},
    {
        "messages": [USER],
        "tools": MANY_TOOLS[:3],
        "tool_choice": {"type": "function", "function": {"name": "lookup_1"}},
    },
    {
        "messages": [
            USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup_0", "arguments": '{"query": "harbour reports"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "3 found."}]},
        ],
        "tools": MANY_TOOLS[:1],
    },
    {"messages": [USER], "reasoning_effort": "high"},
    {"messages": [USER], "reasoning_effort": "none"},
    {"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}},
    {"messages": [USER], "reasoning": {"enabled": True}},
    {"messages": [USER], "response_format": {"type": "json_object"}},  # a grammar, no prompt tokens
    {"messages": [USER, {"role": "assistant", "content": "The harbour reports are"}]},  # becomes a user's
    {
        "messages": [USER, {"role": "assistant", "content": "The harbour reports are"}],
        "continue_final_message": True,  # taken out, its text appended after the generation prompt
    },
]


def _model_folder(root: Path, name: str, template: str, as_file: bool) -> Path:
    """The tiny chat model's tokenizer with `template`, in tokenizer_config.json or, `as_file`, in
    chat_template.jinja beside a different one in the config (the file must win)."""
    source = ensure_tiny_chat_model()
    folder = root / name
    folder.mkdir()
    for file in ("tokenizer.json", "config.json"):
        shutil.copy(source / file, folder / file)
    config = json.loads((source / "tokenizer_config.json").read_text())
    if as_file:
        (folder / "chat_template.jinja").write_text(template)
        config["chat_template"] = "{{ 'the config template must not be used' }}"
    else:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


# Folders whose tokenizer is the repository's own code: loaded with remote code trusted, by both.
REMOTE_CODE = {"tools-tiktoken"}


def _sglang_counts(folder: Path, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    environment = built_environment(ENGINE_ENVIRONMENT)
    assert environment is not None, "SGLang's environment is not built: run `make tools`"
    trust = ["--trust-remote-code"] if folder.name in REMOTE_CODE else []
    done = subprocess.run(
        [str(environment / "bin" / "python"), str(HARNESS), str(folder), *trust],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    return answers


@pytest.fixture(scope="module")
def corpus(
    tmp_path_factory: pytest.TempPathFactory,
) -> list[tuple[str, dict[str, Any], Path, dict[str, Any]]]:
    """(template, request, folder, SGLang's answer) for every template and request."""
    root = tmp_path_factory.mktemp("templates")
    folders = {name: _model_folder(root, name, source, as_file=False) for name, source in TEMPLATES.items()}
    folders["tools-as-file"] = _model_folder(root, "tools-as-file", TOOLS_TEMPLATE, as_file=True)
    folders["tools-sentencepiece"] = sentencepiece_folder(root / "tools-sentencepiece", TOOLS_TEMPLATE)
    folders["tools-tiktoken"] = tiktoken_folder(root / "tools-tiktoken", TOOLS_TEMPLATE)
    # Each run is mostly SGLang's imports (about 8 s, 1 GB): two at a time.
    with ThreadPoolExecutor(max_workers=2) as pool:
        counted = pool.map(lambda folder: _sglang_counts(folder, REQUESTS), folders.values())
        answered = dict(zip(folders, counted, strict=True))
    rows = []
    for name, folder in folders.items():
        answers = answered[name]
        assert len(answers) == len(REQUESTS)
        rows += [(name, request, folder, answer) for request, answer in zip(REQUESTS, answers, strict=True)]
    return rows


def test_every_request_counts_as_sglang_counts_it(corpus) -> None:
    wrong = []
    for name, request, folder, answer in corpus:
        assert "count" in answer, (name, request, answer)  # SGLang renders every request here
        ours = ModelTokenizer(folder, trust_remote_code=name in REMOTE_CODE).chat(copy.deepcopy(request))
        if ours != answer["count"]:
            wrong.append((name, json.dumps(request)[:160], ours, answer["count"]))
    assert not wrong, "\n".join(f"{n}: ours {o}, SGLang {s}: {r}" for n, r, o, s in wrong)
    kinds = {name for name, *_ in corpus}
    assert {"tools-sentencepiece", "tools-tiktoken"} <= kinds and len(corpus) == len(kinds) * len(REQUESTS)


def test_tool_definitions_are_counted_where_the_old_count_left_them_out(corpus) -> None:
    """2K tokens of tools: the count before #39 rendered the messages alone; now exact."""
    _, request, folder, answer = next(
        row
        for row in corpus
        if row[0] == "tools" and row[1].get("tools") is MANY_TOOLS and "tool_choice" not in row[1]
    )
    counter = ModelTokenizer(folder)
    old = counter.chat({"messages": request["messages"]})  # what reached the template before
    assert answer["count"] - old >= 2000, (old, answer)
    assert counter.chat(request) == answer["count"]
