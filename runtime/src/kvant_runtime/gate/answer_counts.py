"""What an engine's answer says it held, read by the gate after relaying it: each sequence's output
length (the forecast learns from it) and the prompt tokens (the bytes estimate learns from them).

A whole answer is parsed once; a streamed one is read from its kept tail, whose last event carries
SGLang's counts so far (meta_info, or OpenAI usage), whatever `--stream-interval` groups.
"""

from __future__ import annotations

import json
from typing import Any


class Answered:
    """What the engine's answer says it held: each sequence's output length, and the prompt tokens."""

    def __init__(self) -> None:
        self.outputs: list[int] = []
        self.prompt_tokens = 0

    def read(self, body: bytes) -> None:
        """From a whole answer (or a stream's last event), parsed once."""
        items = _answer_items(body)
        self.outputs += _output_tokens(items)
        self.prompt_tokens = _prompt_tokens(items)

    def read_stream(self, tail: bytes, events: int) -> None:
        """From a stream's kept tail: its last event's counts, else one output token per event less
        the closing [DONE] (OpenAI chunks without usage, one token per chunk at the default interval)."""
        self.read(last_event(tail))
        if not self.outputs and events > 1:
            self.outputs.append(events - 1)


def last_event(tail: bytes) -> bytes:
    """The data of a stream's last event before [DONE]: SGLang's chunks carry the counts so far in
    meta_info (or OpenAI usage), whatever `--stream-interval` groups. b"" when the tail starts inside
    that event (longer than the tail) or has none."""
    for event in reversed(tail.split(b"\n\n")):
        data = event.strip()
        if not data or data[5:].strip() == b"[DONE]":
            continue
        return data[5:] if data.startswith(b"data:") else b""
    return b""


def streamed_output_tokens(tail: bytes, events: int) -> list[int]:
    """A streamed sequence's output length (see `Answered.read_stream`)."""
    answered = Answered()
    answered.read_stream(tail, events)
    return answered.outputs


def answered_output_tokens(body: bytes) -> list[int]:
    """Each sequence's output length in a whole answer (see `_output_tokens`)."""
    return _output_tokens(_answer_items(body))


def _answer_items(body: bytes) -> list[dict[str, Any]]:
    """A whole answer's objects: one, or one per item of a batch; [] when it is not JSON."""
    try:
        answer = json.loads(body) if body else None
    except ValueError:
        return []
    return [item for item in (answer if isinstance(answer, list) else [answer]) if isinstance(item, dict)]


def _output_tokens(items: list[dict[str, Any]]) -> list[int]:
    """SGLang's meta_info.completion_tokens (one per item of a batch), or OpenAI's
    usage.completion_tokens shared over its choices."""
    found = []
    for item in items:
        meta, usage = item.get("meta_info"), item.get("usage")
        if isinstance(meta, dict) and isinstance(meta.get("completion_tokens"), int):
            found.append(meta["completion_tokens"])
        elif isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            choices = max(1, len(item.get("choices") or []))
            found += [usage["completion_tokens"] // choices] * choices
    return found


def _prompt_tokens(items: list[dict[str, Any]]) -> int:
    """The prompt tokens the engine reports (meta_info, or OpenAI usage), summed over a batch."""
    total = 0
    for item in items:
        for section in ("meta_info", "usage"):
            found = item.get(section)
            if isinstance(found, dict) and isinstance(found.get("prompt_tokens"), int):
                total += found["prompt_tokens"]
                break
    return total
