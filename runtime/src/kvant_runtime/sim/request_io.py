"""The simulator's request bodies and error answers, as SGLang's: a bad request is a 400 with its
OpenAI-style error body, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kvant_runtime.sim.engine import RequestRejected
from kvant_runtime.sim.pd_handoff import HandoffError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, message: str) -> web.Response:
    """SGLang's OpenAI-style error body."""
    body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
    return web.json_response(body, status=status)


@web.middleware
async def bad_requests_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except (ValueError, RequestRejected) as error:
        return error_response(400, str(error))
    except HandoffError as error:  # the router retries a 502 on another pair
        return error_response(502, str(error))


async def read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except json.JSONDecodeError as error:
        raise ValueError(f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return body
