"""Prefill/decode in the simulator: a STAND-IN for SGLang's KV transfer, just enough for the router.

What SGLang does: the router (smg) sends each request to a prefill and a decode engine at once, with
`bootstrap_host`, `bootstrap_port` (the prefill pod's) and a random `bootstrap_room`. The prefill
computes the prompt's KV and pushes it to the decode over RDMA (mooncake, NIXL); the two find each
other through the prefill's bootstrap server, keyed by the room. The decode then generates.

What the simulator does: the prefill runs the prompt (one output token, as SGLang's prefill does),
then posts `{prompt_tokens}` for the room on its bootstrap server, an HTTP side channel on the
bootstrap port. The decode long-polls that room on `bootstrap_host:bootstrap_port`, and holds the
prompt's KV without a prefill cost (the KV arrived by transfer) before decoding. Both sides count
their work in their own `sglang:*` metrics. No bytes of KV move: there is no KV here.

Bounded: a room waits `ROOM_TTL_SECONDS` for its decode and at most `MAX_ROOMS` wait at once; a fetch
waits at most `MAX_WAIT_SECONDS` and reads at most `MAX_RECORD_BYTES`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from kvant_runtime.http_body import read_up_to

ROUTE = "/kvant-sim/handoff/{room}"
MAX_WAIT_SECONDS = 30.0
ROOM_TTL_SECONDS = 60.0
MAX_ROOMS = 4096
MAX_RECORD_BYTES = 4096


class HandoffError(RuntimeError):
    """The decode could not get the request's KV from its prefill (the message says why)."""


@dataclass(frozen=True)
class Bootstrap:
    """The fields the router adds to a request it sends to a prefill/decode pair."""

    host: str
    port: int
    room: int

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Bootstrap | None:
        """None when the request carries none of them; ValueError when they are malformed (a batch
        carries lists, which the simulator does not disaggregate)."""
        fields = (body.get("bootstrap_host"), body.get("bootstrap_port"), body.get("bootstrap_room"))
        if all(f is None for f in fields):
            return None
        host, port, room = fields
        if not isinstance(host, str) or not host or len(host) > 253:
            raise ValueError("bootstrap_host must be a host name or address (one prompt per request)")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise ValueError("bootstrap_port must be an integer port, 1-65535")
        if not isinstance(room, int) or isinstance(room, bool) or not 0 <= room < 2**64:
            raise ValueError("bootstrap_room must be an unsigned 64-bit integer")
        return cls(host, port, room)


class HandoffBoard:
    """The prefill's side: rooms whose prompt is done, each kept until its decode fetches it."""

    def __init__(self) -> None:
        self._records: dict[int, tuple[float, dict[str, int]]] = {}
        self._ready: dict[int, asyncio.Event] = {}

    def publish(self, room: int, prompt_tokens: int) -> None:
        self._expire(time.monotonic())
        if len(self._records) >= MAX_ROOMS:  # decodes that never came: drop the oldest
            oldest = min(self._records, key=lambda r: self._records[r][0])
            self._records.pop(oldest)
        self._records[room] = (time.monotonic(), {"room": room, "prompt_tokens": prompt_tokens})
        self._event(room).set()

    async def take(self, room: int, wait_seconds: float) -> dict[str, int] | None:
        event = self._event(room)
        try:
            await asyncio.wait_for(event.wait(), timeout=wait_seconds)
        except TimeoutError:
            self._ready.pop(room, None)  # a later publish makes a new one
            return None
        self._ready.pop(room, None)
        entry = self._records.pop(room, None)
        return None if entry is None else entry[1]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(ROUTE, self._serve)
        return app

    async def _serve(self, request: web.Request) -> web.Response:
        try:
            room = int(request.match_info["room"])
            wait = min(max(float(request.query.get("wait", "0")), 0.0), MAX_WAIT_SECONDS)
        except ValueError:
            return web.json_response({"error": "room must be an integer, wait a number"}, status=400)
        record = await self.take(room, wait)
        if record is None:
            return web.json_response({"error": f"room {room} was not prefilled in time"}, status=404)
        return web.json_response(record)

    def _event(self, room: int) -> asyncio.Event:
        return self._ready.setdefault(room, asyncio.Event())

    def _expire(self, now: float) -> None:
        for room in [r for r, (at, _) in self._records.items() if now - at > ROOM_TTL_SECONDS]:
            self._records.pop(room)
            self._ready.pop(room, None)


async def fetch_handoff(bootstrap: Bootstrap, wait_seconds: float = MAX_WAIT_SECONDS) -> int:
    """The decode's side: the room's prompt tokens, once its prefill is done."""
    host = f"[{bootstrap.host}]" if ":" in bootstrap.host else bootstrap.host
    url = f"http://{host}:{bootstrap.port}{ROUTE.format(room=bootstrap.room)}"
    timeout = aiohttp.ClientTimeout(total=wait_seconds + 5.0, sock_connect=5.0)
    where = f"prefill {bootstrap.host}:{bootstrap.port} room {bootstrap.room}"
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, params={"wait": str(wait_seconds)}) as response,
        ):
            body = await read_up_to(response, MAX_RECORD_BYTES)
            if response.status != 200:
                raise HandoffError(f"KV transfer from {where} failed: HTTP {response.status}")
    except (aiohttp.ClientError, TimeoutError) as error:
        raise HandoffError(f"KV transfer from {where} failed: {error!r}") from None
    try:
        if len(body) > MAX_RECORD_BYTES:
            raise ValueError("record too large")
        record = json.loads(body)
        prompt_tokens = record["prompt_tokens"]
        if not isinstance(prompt_tokens, int) or prompt_tokens < 1 or record.get("room") != bootstrap.room:
            raise ValueError("unexpected record")
    except (ValueError, KeyError, TypeError) as error:
        raise HandoffError(f"KV transfer from {where} failed: bad record ({error})") from None
    return prompt_tokens
