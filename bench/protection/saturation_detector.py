"""The bench's anchor, not Kvant's: a proxy that sheds load the way llm-d / Gateway API Inference
Extension's saturation detector does, so `trace.py` can compare the gate against it in one run.

GIE's endpoint picker scrapes each model server about every 50 ms and calls the pool saturated when
no server has capacity: a server has capacity while its metrics are fresh (under 200 ms old), its
waiting queue is at most 5 and its KV cache utilisation at most 0.8 (the detector's defaults).
Sheddable requests that arrive while saturated are refused with 429; everything else is forwarded.
Here every request is sheddable and there is one server. This is a re-statement of that rule for one
engine, written for the bench; it is not GIE's code.

The two numbers come from SGLang's `/v1/loads` (waiting requests; used ÷ total KV tokens, the same
utilisation as its `token_usage` gauge), not from `/metrics`. On the real CPU engine a `/metrics`
answer costs its HTTP process about 23 ms (`/v1/loads`: 3 ms), the process that also tokenizes and
streams every request: scraped every 50 ms, the detector took a third or more of it, so its front
finished 87 requests at 1x where `off` finished 261, all late (bench/README.md). A GPU server's HTTP
process has cores to spare for that; this one does not, and the anchor should not pay for a cost
the rule does not need. The rule, the interval and the thresholds are unchanged.

    python bench/protection/saturation_detector.py --listen PORT --upstream http://127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from kvant_runtime.gate.engine_load import LOADS_PATH, EngineLoadError, parse_loads

QUEUE_DEPTH_THRESHOLD = 5
KV_CACHE_UTIL_THRESHOLD = 0.8
METRICS_STALENESS_SECONDS = 0.2
REFRESH_SECONDS = 0.05
SESSION = web.AppKey("session", aiohttp.ClientSession)


class Detector:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.queue = 0.0
        self.kv = 0.0
        self.fresh_at = 0.0

    def saturated(self) -> bool:
        stale = time.monotonic() - self.fresh_at > METRICS_STALENESS_SECONDS
        return stale or self.queue > QUEUE_DEPTH_THRESHOLD or self.kv > KV_CACHE_UTIL_THRESHOLD

    async def scrape(self, session: aiohttp.ClientSession) -> None:
        while True:
            try:
                async with session.get(self.upstream + LOADS_PATH) as response:
                    load = parse_loads(await response.json(content_type=None), time.monotonic())
                self.queue = float(load.waiting)
                self.kv = load.used_tokens / load.capacity
                self.fresh_at = time.monotonic()
            except (aiohttp.ClientError, TimeoutError, ValueError, EngineLoadError):
                pass  # stale metrics count as saturated
            await asyncio.sleep(REFRESH_SECONDS)


def app(upstream: str) -> web.Application:
    detector = Detector(upstream.rstrip("/"))
    application = web.Application(client_max_size=1 << 24)

    async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=600)
        )
        scraper = asyncio.create_task(detector.scrape(session))
        application[SESSION] = session
        yield
        scraper.cancel()
        await session.close()

    async def forward(request: web.Request) -> web.StreamResponse:
        if request.path == "/generate" and detector.saturated():
            return web.json_response({"error": "saturated"}, status=429)
        body = await request.read()
        session = application[SESSION]
        url = detector.upstream + request.path_qs
        # The body's type goes along: SGLang's FastAPI server refuses a JSON body sent without it (400).
        headers = {"Content-Type": request.content_type} if body else {}
        async with session.request(request.method, url, data=body or None, headers=headers) as up:
            response = web.StreamResponse(status=up.status)
            response.content_type = up.content_type
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    application.cleanup_ctx.append(lifecycle)
    application.router.add_route("*", "/{tail:.*}", forward)
    return application


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--upstream", required=True, help="the engine's base URL (loopback)")
    args = parser.parse_args()
    web.run_app(app(args.upstream), host="127.0.0.1", port=args.listen, print=None, access_log=None)


if __name__ == "__main__":
    main()
