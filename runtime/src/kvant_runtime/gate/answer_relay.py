"""The engine's answer relayed back to the client, and the headers that cross the gate's hop.

Sized, small answers are relayed in one piece; larger or unsized ones (SSE) chunk by chunk as they
arrive, never buffered, keeping only the stream's tail, where the last event tells what the engine
held (`answer_counts`). Per-connection headers stay on their own hop, both ways.
"""

from __future__ import annotations

import collections
import logging

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from kvant_runtime.gate.answer_counts import Answered

log = logging.getLogger("kvant.gate")

# Sized answers up to this are relayed in one piece; larger or unsized ones (SSE) chunk by chunk.
WHOLE_BODY_BYTES = 1 << 20
# Kept of a streamed answer to read its last event: SGLang's /generate chunks repeat the text and
# output ids so far, so a 4,096-token answer's last event is some 50 KB.
STREAM_TAIL_BYTES = 256 << 10
# Per-connection headers (RFC 9110 §7.6.1) plus the ones aiohttp recomputes for the new hop.
_NOT_FORWARDED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


async def relay_answer(
    request: web.Request, upstream: aiohttp.ClientResponse, answered: Answered | None
) -> web.StreamResponse:
    """Relays the engine's answer to the client; with `answered`, reads what it says the engine held."""
    headers = forwarded_headers(upstream.headers)
    length = upstream.content_length
    if length is not None and length <= WHOLE_BODY_BYTES:
        # A sized, small answer (non-streaming): one read and one write beat a chunk loop.
        body = await upstream.read()
        if answered is not None:
            answered.read(body)
        return web.Response(status=upstream.status, reason=upstream.reason, headers=headers, body=body)
    events = 0  # SSE events relayed
    # The stream's last chunks, at least STREAM_TAIL_BYTES of them, where its final event tells the
    # output length. Whole chunks are dropped from the front: no copy of the tail per chunk.
    tail: collections.deque[bytes] = collections.deque()
    kept = 0
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    if length is not None:
        response.content_length = length
    await response.prepare(request)
    try:
        async for chunk in upstream.content.iter_any():
            events += chunk.count(b"data:")
            tail.append(chunk)
            kept += len(chunk)
            while kept - len(tail[0]) >= STREAM_TAIL_BYTES:
                kept -= len(tail.popleft())
            await response.write(chunk)
    except aiohttp.ClientError as err:
        # Headers are gone already; closing without the final chunk tells the client it is cut short.
        log.warning("event=upstream_broke path=%s error=%r", request.path, err)
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof()
    if answered is not None:
        answered.read_stream(b"".join(tail)[-STREAM_TAIL_BYTES:], events)
    return response


def forwarded_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """`headers` less those that belong to one hop, for the next one."""
    forwarded = headers.copy()
    for name in _NOT_FORWARDED:
        if name in forwarded:
            del forwarded[name]
    return forwarded
