"""Reading an HTTP answer's body whole, with a bound: aiohttp's `content.read(n)` returns what has
arrived so far, not the body, so a body larger than one network read came back cut (the gate's merged
/metrics page ended mid-line)."""

from __future__ import annotations

import aiohttp


async def read_up_to(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body to its end when it is at most `limit` bytes; otherwise its first `limit` + 1 bytes (the
    caller refuses it by its length, having read no more than that)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)[: limit + 1]
