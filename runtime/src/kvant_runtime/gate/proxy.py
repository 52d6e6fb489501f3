"""The request path: classify the route, read the body, admit, forward, stream the answer back.

The route policy (`route_policy`) decides: every generating route goes through admission, costed by
`kvant_runtime.request_cost`; read-only and tool routes (`/health`, `/metrics`, `/v1/models`,
`/tokenize`, ...) pass straight through; admin and mutating routes get 403, and routes SGLang does
not serve 404, before the body is read. Response bodies are relayed chunk by chunk as they arrive
(`answer_relay`): SSE streams are never buffered.

Each admitted request carries who it is for (`access.Identity`: tenant, and a class only a key or a
trusted source may set) and the client's time budget (`X-Kvant-Deadline-Ms`), which admission uses
to order the queue and to refuse at once what cannot start in time. The class goes on to the engine
in the body's `priority` field (`request_cost`), and SGLang's own `x-override-priority` header is
never forwarded, so a client's own priority reaches neither queue.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time

import aiohttp
from aiohttp import web
from yarl import URL

from kvant_contracts.serving_pod import GATE_READINESS_PATH
from kvant_contracts.tenancy import DEADLINE_HEADER, ENGINE_PRIORITY, OVERRIDE_PRIORITY_HEADER
from kvant_runtime.gate import server_info
from kvant_runtime.gate.access import Access, Identity
from kvant_runtime.gate.admission import Admission, Ticket
from kvant_runtime.gate.answer_counts import Answered
from kvant_runtime.gate.answer_relay import forwarded_headers, relay_answer
from kvant_runtime.gate.draining import Traffic
from kvant_runtime.gate.engine_count import CHAT_PATH, TEXT_FIELDS, EngineRefused, engine_prompt_tokens
from kvant_runtime.gate.forecast import OutputForecast
from kvant_runtime.gate.gate_metrics import GateMetrics
from kvant_runtime.gate.refusals import Rejected
from kvant_runtime.gate.route_policy import RouteClass, classify
from kvant_runtime.image_tokens import ImageProcessor
from kvant_runtime.prompt_counter import ByteEstimate, PromptCounter
from kvant_runtime.request_cost import BadRequest, cost_request
from kvant_runtime.tokenizer_files import LONG_TEXT_CHARS

# A client that has not sent its whole body by then is cut off (408): a slow sender holds no slot.
BODY_READ_SECONDS = 30.0
# Bodies larger than this are costed in a worker thread when a tokenizer counts them (see
# _admit_and_forward): about 1,000 tokens of prose; the tokenizer releases the GIL for such texts.
INLINE_COUNT_BYTES = LONG_TEXT_CHARS
# Requests the gate holds at once, of every kind (queued, in flight, passed through); past it, 503.
MAX_OPEN_REQUESTS = 8192


class Refused(Exception):
    """The gate answers the request itself with `status`; `reason` is the metric label."""

    def __init__(self, status: int, reason: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


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
        images: ImageProcessor | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.forecast = forecast or OutputForecast()
        self.counter = counter or ByteEstimate()
        self.images = images  # a model that reads images: the tokens its image parts become
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
        arrived = time.monotonic()  # the client's deadline budget counts from here
        route = classify(request.method, request.path)
        if route is None:
            raise Refused(404, "unknown_route", f"{request.method} {request.path} is not served here")
        authorization = request.headers.get("Authorization")
        identity = Identity()
        if route is RouteClass.ADMIN:
            if not self.access.admin_allowed(authorization):
                closed = "need the model's admin token" if self.access.admin.configured else "are closed"
                raise Refused(
                    403,
                    "admin_route",
                    f"{request.method} {request.path} changes or inspects the engine; admin routes "
                    f"{closed} at the gate",
                )
        else:
            found = self.access.identify(request.path, authorization, request.headers)
            if found is None:
                raise Refused(401, "unauthorized", "this model needs an API key: Authorization: Bearer <key>")
            identity = found
        try:
            async with asyncio.timeout(BODY_READ_SECONDS):
                body = await _read_body(request, self.admission.limits.maxRequestBytes)
        except TimeoutError:
            raise Refused(
                408, "body_timeout", f"the request body did not arrive within {BODY_READ_SECONDS:g}s"
            ) from None
        if route is RouteClass.GENERATE:
            try:
                return await self._admit_and_forward(request, body, identity, arrived)
            except Refused as refused:
                tenancy = self.admission.limits.tenancy
                priority = tenancy.priority_of(identity.tenant, identity.priority)
                self.metrics.tenants.refused(identity.tenant, priority, refused.reason)
                raise
        return await self._forward(request, body)

    async def _admit_and_forward(
        self, request: web.Request, body: bytes, identity: Identity, arrived: float
    ) -> web.StreamResponse:
        budget = _deadline_seconds(request.headers.get(DEADLINE_HEADER))
        default = self.admission.limits.defaultMaxTokens
        priority = ENGINE_PRIORITY[
            self.admission.limits.tenancy.priority_of(identity.tenant, identity.priority)
        ]
        engine_counts = await self._engine_count(request.path, body)
        cost_it = functools.partial(
            cost_request,
            request.path,
            body,
            default,
            self.counter,
            priority,
            engine_counts=engine_counts,
            images=self.images,
        )
        try:
            if (self.counter.exact or self.images) and len(body) > INLINE_COUNT_BYTES:
                # A tokenizer takes milliseconds per 1,000 tokens (bench/gate/token_count.py): off the
                # event loop, so one long prompt does not stall every other request's relay.
                cost = await asyncio.to_thread(cost_it)
            else:
                cost = cost_it()
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
        # What is left of the client's budget once its body was read and costed.
        deadline = None if budget is None else max(0.0, budget - (time.monotonic() - arrived))
        self.queued_bytes += len(cost.body)
        try:
            ticket = await self.admission.acquire(
                reserve,
                worst_case=cost.tokens,
                sequences=cost.sequences,
                tenant=identity.tenant,
                priority=identity.priority,
                deadline_seconds=deadline,
                output_tokens=max(0, reserve - cost.prompt_tokens),
            )
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
                self.counter.learn(cost.prompt_tokens, answered.prompt_tokens, cost.shape)

    async def _engine_count(self, path: str, body: bytes) -> list[int] | None:
        """The engine's count of each of the request's prompts, or None (the gate counts them)."""
        asked = path == CHAT_PATH or (path in TEXT_FIELDS and not self.counter.exact)
        if not asked:
            return None
        try:
            counts = await engine_prompt_tokens(
                self.session, self.upstream, path, body, texts_too=not self.counter.exact
            )
        except EngineRefused as refused:
            raise Refused(400, "bad_request", f"the engine refuses the prompt: {refused}") from None
        self.metrics.prompt_counts.labels("engine" if counts is not None else "gate").inc()
        return counts

    def _count_admitted(self, ticket: Ticket) -> None:
        self.metrics.admitted.inc()
        self.metrics.tenants.admitted(ticket.tenant, ticket.priority, ticket.tokens)
        self.metrics.queue_wait.observe(ticket.waited_seconds)
        for limit in ticket.over_limits:
            self.metrics.over_limit.labels(limit).inc()

    async def _forward(
        self, request: web.Request, body: bytes, answered: Answered | None = None
    ) -> web.StreamResponse:
        """Forwards and relays; with `answered`, records what the engine says it held."""
        url = URL(self.upstream + request.raw_path, encoded=True)
        headers = forwarded_headers(request.headers)
        headers.popall(OVERRIDE_PRIORITY_HEADER, None)  # the class is the only priority (see above)
        try:
            upstream = await self.session.request(
                request.method,
                url,
                headers=headers,
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
            if request.path in server_info.PATHS and upstream.status == 200:
                return await _without_secrets(upstream)
            return await relay_answer(request, upstream, answered if upstream.status == 200 else None)


async def _without_secrets(upstream: aiohttp.ClientResponse) -> web.Response:
    """SGLang's server info, relayed with its secrets replaced (`server_info`)."""
    try:
        body = server_info.redact(await upstream.read())
    except ValueError:
        raise Refused(502, "engine_error", "the engine's server info is not JSON; not relayed") from None
    return web.Response(body=body, status=200, content_type="application/json")


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


def _deadline_seconds(value: str | None) -> float | None:
    """The client's time budget from DEADLINE_HEADER (milliseconds from now), in seconds; 400 if bad."""
    if value is None:
        return None
    try:
        millis = float(value.strip())
    except ValueError:
        millis = math.nan
    if not math.isfinite(millis) or millis < 0:
        raise Refused(
            400,
            "bad_request",
            f"{DEADLINE_HEADER} must be the milliseconds the client can wait (≥ 0), got {value!r}",
        )
    return millis / 1000.0


def _error_response(refused: Refused) -> web.Response:
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after is not None else None
    body = {"error": {"message": str(refused), "type": refused.reason, "code": refused.status}}
    return web.json_response(body, status=refused.status, headers=headers)
