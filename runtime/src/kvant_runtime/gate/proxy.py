"""The request path: classify the route, read the body, admit, forward, stream the answer back.

The route policy (`route_policy`) decides: every generating route goes through admission, costed by
`kvant_runtime.request_cost`; read-only and tool routes (`/health`, `/metrics`, `/v1/models`,
`/tokenize`, ...) pass straight through; admin and mutating routes get 403, and routes SGLang does
not serve 404, before the body is read. Response bodies are relayed chunk by chunk as they arrive:
SSE streams are never buffered.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from kvant_contracts.serving_pod import GATE_READINESS_PATH
from kvant_runtime.gate.access import Access
from kvant_runtime.gate.admission import Admission, Rejected, Ticket
from kvant_runtime.gate.answer_counts import Answered
from kvant_runtime.gate.forecast import OutputForecast
from kvant_runtime.gate.gate_metrics import GateMetrics
from kvant_runtime.gate.route_policy import RouteClass, classify
from kvant_runtime.prompt_counter import LONG_TEXT_CHARS, ByteEstimate, PromptCounter
from kvant_runtime.request_cost import BadRequest, cost_request

log = logging.getLogger("kvant.gate")

# Sized answers up to this are relayed in one piece; larger or unsized ones (SSE) chunk by chunk.
WHOLE_BODY_BYTES = 1 << 20
# Kept of a streamed answer to read its last event: SGLang's /generate chunks repeat the text and
# output ids so far, so a 4,096-token answer's last event is some 50 KB.
STREAM_TAIL_BYTES = 256 << 10
# A client that has not sent its whole body by then is cut off (408): a slow sender holds no slot.
BODY_READ_SECONDS = 30.0
# Bodies larger than this are costed in a worker thread when a tokenizer counts them (see
# _admit_and_forward): about 1,000 tokens of prose; the tokenizer releases the GIL for such texts.
INLINE_COUNT_BYTES = LONG_TEXT_CHARS
# Requests the gate holds at once, of every kind (queued, in flight, passed through); past it, 503.
MAX_OPEN_REQUESTS = 8192
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


class Refused(Exception):
    """The gate answers the request itself with `status`; `reason` is the metric label."""

    def __init__(self, status: int, reason: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


@dataclass
class Traffic:
    """What a drain watches: the requests the proxy holds now, and what arrived when."""

    open: int = 0  # queued, in flight or passed through
    arrived: int = 0
    last_arrival: float = field(default_factory=time.monotonic)
    draining: bool = False


class Proxy:
    """Handles every request the gate's listener receives, except its own paths (`/gate/...`)."""

    def __init__(
        self,
        upstream: str,
        admission: Admission,
        metrics: GateMetrics,
        session: aiohttp.ClientSession,
        *,
        access: Access | None = None,
        forecast: OutputForecast | None = None,
        counter: PromptCounter | None = None,
        traffic: Traffic | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.forecast = forecast or OutputForecast()
        self.counter = counter or ByteEstimate()
        self.admission = admission
        self.metrics = metrics
        self.session = session
        self.access = access or Access()
        self.traffic = traffic or Traffic()
        self.queued_bytes = 0  # bodies of generating requests not yet admitted

    async def handle(self, request: web.Request) -> web.StreamResponse:
        traffic = self.traffic
        if traffic.draining and request.method in ("GET", "HEAD") and request.path == GATE_READINESS_PATH:
            # Not a request to serve: the probes and the router asking, and they must not keep the
            # drain from ending, so neither counted nor passed to the engine.
            return _error_response(
                Refused(503, "draining", "the gate is draining: it finishes what it holds, then exits")
            )
        traffic.open += 1
        traffic.arrived += 1
        traffic.last_arrival = time.monotonic()
        try:
            response = await self._serve(request)
            if traffic.draining:
                # A client keeping its connection would keep sending here, past the router and the
                # Service that dropped this pod: closing it sends the next request through them.
                response.force_close()
                if not response.prepared:
                    # Sent before the request stops counting, so a drain ending at once does not close
                    # the listener on an answer still unsent.
                    await response.prepare(request)
                    await response.write_eof()
        finally:
            traffic.open -= 1
        return response

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        try:
            if self.traffic.open > MAX_OPEN_REQUESTS:
                raise Refused(503, "overloaded", f"the gate holds {MAX_OPEN_REQUESTS} requests already", 1)
            return await self._handle(request)
        except Refused as refused:
            self.metrics.rejected.labels(refused.reason).inc()
            return _error_response(refused)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = classify(request.method, request.path)
        if route is None:
            raise Refused(404, "unknown_route", f"{request.method} {request.path} is not served here")
        authorization = request.headers.get("Authorization")
        if route is RouteClass.ADMIN:
            if not self.access.admin_allowed(authorization):
                closed = "need the model's admin token" if self.access.admin.configured else "are closed"
                raise Refused(
                    403,
                    "admin_route",
                    f"{request.method} {request.path} changes or inspects the engine; admin routes "
                    f"{closed} at the gate",
                )
        elif not self.access.client_allowed(request.path, authorization):
            raise Refused(401, "unauthorized", "this model needs an API key: Authorization: Bearer <key>")
        try:
            async with asyncio.timeout(BODY_READ_SECONDS):
                body = await _read_body(request, self.admission.limits.maxRequestBytes)
        except TimeoutError:
            raise Refused(
                408, "body_timeout", f"the request body did not arrive within {BODY_READ_SECONDS:g}s"
            ) from None
        if route is RouteClass.GENERATE:
            return await self._admit_and_forward(request, body)
        return await self._forward(request, body)

    async def _admit_and_forward(self, request: web.Request, body: bytes) -> web.StreamResponse:
        default = self.admission.limits.defaultMaxTokens
        try:
            if self.counter.exact and len(body) > INLINE_COUNT_BYTES:
                # A tokenizer takes milliseconds per 1,000 tokens (bench/gate/token_count.py): off the
                # event loop, so one long prompt does not stall every other request's relay.
                cost = await asyncio.to_thread(cost_request, request.path, body, default, self.counter)
            else:
                cost = cost_request(request.path, body, default, self.counter)
        except BadRequest as bad:
            raise Refused(400, "bad_request", str(bad)) from None
        limits = self.admission.limits
        if self.queued_bytes + len(cost.body) > limits.maxQueuedBytes:
            raise Refused(
                429,
                "queue_bytes",
                f"the gate's queue holds {self.queued_bytes} bytes of requests (maxQueuedBytes="
                f"{limits.maxQueuedBytes})",
                limits.retryAfterSeconds,
            )
        reserve = cost.tokens
        if limits.admission == "forecast" and cost.sequences:
            reserve = self.forecast.reserve(cost.prompt_tokens, cost.sequences, cost.limit)
        self.queued_bytes += len(cost.body)
        try:
            ticket = await self.admission.acquire(reserve, worst_case=cost.tokens, sequences=cost.sequences)
        except Rejected as rejected:
            raise Refused(rejected.status, rejected.reason, str(rejected), rejected.retry_after) from None
        finally:
            self.queued_bytes -= len(cost.body)
        self._count_admitted(ticket)
        answered = Answered()
        try:
            return await self._forward(request, cost.body, answered if cost.sequences else None)
        finally:
            self.admission.release(ticket)
            for tokens in answered.outputs:  # what the model really generated: the forecast learns from it
                self.forecast.observe(tokens, cost.limit)
            # And what the prompt really held: from single-sequence answers only, since SGLang reports
            # the prompt once per sample of a batch or of `n`, where the gate counted it once.
            if cost.counted and cost.sequences == 1 and answered.prompt_tokens:
                self.counter.learn(cost.prompt_tokens, answered.prompt_tokens)

    def _count_admitted(self, ticket: Ticket) -> None:
        self.metrics.admitted.inc()
        self.metrics.queue_wait.observe(ticket.waited_seconds)
        for limit in ticket.over_limits:
            self.metrics.over_limit.labels(limit).inc()

    async def _forward(
        self, request: web.Request, body: bytes, answered: Answered | None = None
    ) -> web.StreamResponse:
        """Forwards and relays; with `answered`, records what the engine says it held."""
        url = URL(self.upstream + request.raw_path, encoded=True)
        try:
            upstream = await self.session.request(
                request.method,
                url,
                headers=_forwarded(request.headers),
                data=body or None,
                allow_redirects=False,
            )
        except aiohttp.ClientConnectorError as err:
            raise Refused(
                503,
                "engine_unavailable",
                f"the engine at {self.upstream} is not reachable: {err}",
                self.admission.limits.retryAfterSeconds,
            ) from None
        except aiohttp.ClientError as err:
            raise Refused(502, "engine_error", f"the engine at {self.upstream} failed: {err!r}") from None
        async with upstream:
            return await _relay(request, upstream, answered if upstream.status == 200 else None)


async def _relay(
    request: web.Request, upstream: aiohttp.ClientResponse, answered: Answered | None
) -> web.StreamResponse:
    headers = _forwarded(upstream.headers)
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


async def _read_body(request: web.Request, limit: int) -> bytes:
    too_large = Refused(413, "body_too_large", f"the request body exceeds maxRequestBytes={limit}")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _forwarded(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    forwarded = headers.copy()
    for name in _NOT_FORWARDED:
        if name in forwarded:
            del forwarded[name]
    return forwarded


def _error_response(refused: Refused) -> web.Response:
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after is not None else None
    body = {"error": {"message": str(refused), "type": refused.reason, "code": refused.status}}
    return web.json_response(body, status=refused.status, headers=headers)
