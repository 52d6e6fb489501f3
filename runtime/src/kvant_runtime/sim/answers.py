"""What the simulator's answers look like: SGLang's `meta_info`, OpenAI's choices and usage, and
server-sent events, as the real engine frames them (clients and the gate parse these shapes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from kvant_runtime.sim.realtime import Stream
from kvant_runtime.sim.text import detokenize

EOS_TOKEN_ID = 2  # what `matched` reports when a simulated answer ends at EOS


ChoiceFormat = Callable[[list[int], bool, str | None], dict[str, Any]]


def completion_choice(ids: list[int], _streaming: bool, finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "text": detokenize(ids), "logprobs": None, "finish_reason": finish_reason}


def chat_choice(ids: list[int], streaming: bool, finish_reason: str | None) -> dict[str, Any]:
    message = {"role": "assistant", "content": detokenize(ids)}
    return {"index": 0, "delta" if streaming else "message": message, "finish_reason": finish_reason}


def meta_info(stream: Stream) -> dict[str, Any]:
    request = stream.request
    meta: dict[str, Any] = {
        "id": request.rid,
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": len(request.output_ids),
        "cached_tokens": 0,
        "finish_reason": None,
    }
    if request.finish_time is not None:
        if request.stopped:
            meta["finish_reason"] = {"type": "stop", "matched": EOS_TOKEN_ID}
        else:
            meta["finish_reason"] = {"type": "length", "length": len(request.output_ids)}
        meta["e2e_latency"] = request.finish_time - request.arrival
    return meta


def finish_reason(stream: Stream) -> str:
    """OpenAI's finish_reason: `stop` at EOS, `length` at max_tokens."""
    return "stop" if stream.request.stopped else "length"


def usage(stream: Stream) -> dict[str, int]:
    prompt, completion = stream.request.prompt_tokens, len(stream.request.output_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def open_sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    return response


async def send_sse(response: web.StreamResponse, data: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(data)}\n\n".encode())


async def close_sse(response: web.StreamResponse) -> web.StreamResponse:
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
