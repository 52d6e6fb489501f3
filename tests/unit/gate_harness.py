"""Real HTTP servers for the gate's tests: a held engine, the gate itself, a kubelet-style limits file.

`HeldEngine` is a real aiohttp server speaking the engine endpoints the gate uses. Its
generation requests do not finish until the test releases them, so tests can hold slots and
watch what the gate does, by events rather than by timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from kvant_contracts.limits import Limits
from kvant_runtime.gate.gate_server import METRICS_PATH, Gate, GateConfig, running_gate

WAIT_SECONDS = 20.0  # generous: a slow CI box must never fail a correct gate


def run(scenario: Coroutine[Any, Any, None]) -> None:
    """Runs one async scenario, failing (not hanging) if it never finishes."""
    asyncio.run(asyncio.wait_for(scenario, 4 * WAIT_SECONDS))


async def until(predicate: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Polls `predicate` until true; fails naming `what` after WAIT_SECONDS."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECONDS
    while loop.time() < deadline:
        result = predicate()
        if result if isinstance(result, bool) else await result:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out after {WAIT_SECONDS:.0f}s waiting for {what}")


class HeldEngine:
    """An engine whose generations finish only when released; its /metrics are set by the test."""

    def __init__(self) -> None:
        self.running = 0
        self.aborted = 0
        self.completed = 0
        self.release = asyncio.Event()
        self.token_usage = 0.0
        self.retracted_total = 0
        self.max_total_num_tokens: int | None = 1000  # None: /metrics lacks the gauge
        self.server_info_tokens: int | None = 1000  # answered on the older /get_server_info only
        self.metrics_status = 200
        self.url = ""
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request that reached it
        self.bodies: list[Any] = []  # the JSON bodies of generation requests, as forwarded
        self.headers: list[dict[str, str]] = []  # and their headers (names lowercased)
        self.completion_tokens = 16  # what /generate reports it generated (the gate's forecast learns it)
        self.waiting = 0  # what /v1/loads reports waiting in the engine besides what it holds
        self.loads_status = 200
        # What /v1/tokenize answers as `count` (SGLang's own count of a prompt); None: 404, as an
        # engine without the route.
        self.tokenize_count: int | list[int] | None = None
        self.tokenized: list[Any] = []  # the bodies /v1/tokenize got

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_post("/generate", self._generate)
        app.router.add_put("/generate", self._generate)
        app.router.add_post("/flush_cache", self._health)  # an admin route: it must never get here
        app.router.add_post("/v1/chat/completions", self._chat_stream)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        # A read-only route SGLang serves; here it answers with the headers it got, so tests see what
        # the gate forwards.
        app.router.add_get("/v1/models", self._echo_headers)
        app.router.add_get("/get_server_info", self._server_info)
        app.router.add_get("/v1/loads", self._loads)
        app.router.add_post("/v1/tokenize", self._tokenize)
        return app

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.tokenized.append(await request.json())
        if self.tokenize_count is None:
            raise web.HTTPNotFound()
        return web.json_response({"tokens": [], "count": self.tokenize_count, "max_model_len": 4096})

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.seen.append((request.method, request.path))
        response: web.StreamResponse = await handler(request)
        return response

    async def _generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        self.headers.append({name.lower(): value for name, value in request.headers.items()})
        await self._hold()
        meta = {"echo": body, "completion_tokens": self.completion_tokens}
        return web.json_response({"text": "ok", "meta_info": meta})

    async def _chat_stream(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices":[{"delta":{"content":"first"}}]}\n\n')
        await self._hold()
        await response.write(b'data: {"choices":[{"delta":{"content":"second"}}]}\n\n')
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _hold(self) -> None:
        self.running += 1
        try:
            await self.release.wait()
            self.completed += 1
        except asyncio.CancelledError:
            self.aborted += 1  # the client (the gate) closed the connection, as SGLang sees an abort
            raise
        finally:
            self.running -= 1

    async def _metrics(self, _request: web.Request) -> web.Response:
        if self.metrics_status != 200:
            return web.Response(status=self.metrics_status, text="metrics unavailable")
        lines = [
            "# TYPE sglang:token_usage gauge",
            f'sglang:token_usage{{model_name="m",tp_rank="0"}} {self.token_usage}',
            "# TYPE sglang:num_retracted_requests_total counter",
            f'sglang:num_retracted_requests_total{{model_name="m",tp_rank="0"}} {self.retracted_total}',
        ]
        if self.max_total_num_tokens is not None:
            lines += [
                "# TYPE sglang:max_total_num_tokens gauge",
                f'sglang:max_total_num_tokens{{model_name="m",tp_rank="0"}} {self.max_total_num_tokens}',
            ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _loads(self, _request: web.Request) -> web.Response:
        """SGLang's /v1/loads: what it holds runs, `waiting` more wait."""
        if self.loads_status != 200:
            return web.Response(status=self.loads_status, text="loads unavailable")
        capacity = self.max_total_num_tokens or 1000
        load = {
            "num_running_reqs": self.running,
            "num_waiting_reqs": self.waiting,
            "num_used_tokens": int(self.token_usage * capacity),
            "max_total_num_tokens": capacity,
        }
        return web.json_response({"version": "0.5.23", "loads": [load]})

    async def _server_info(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": "0.4.0", "max_total_num_tokens": self.server_info_tokens})

    async def _echo_headers(self, request: web.Request) -> web.Response:
        response = web.json_response({k.lower(): v for k, v in request.headers.items()})
        response.headers["X-Engine"] = "held"
        response.set_cookie("session", "from-engine")
        return response


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serves `app` on a free loopback port with handler cancellation (as SGLang aborts on disconnect)."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    sock = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()
        sock.close()


@contextlib.asynccontextmanager
async def held_engine() -> AsyncIterator[HeldEngine]:
    engine = HeldEngine()
    async with serving(engine.app()) as url:
        engine.url = url
        try:
            yield engine
        finally:
            engine.release.set()


class KubeletLimitsDir:
    """A mounted-ConfigMap look-alike: `limits.yaml` → `..data/limits.yaml`, `..data` → a timestamped dir.

    An update writes a new timestamped directory and swaps `..data` atomically, as the kubelet does.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "limits.yaml"
        self._version = 0

    def write(self, limits: dict[str, Any] | str) -> None:
        self._version += 1
        version_dir = self.root / f"..2026_01_01_00_00_00.{self._version}"
        version_dir.mkdir()
        # A mapping is completed with the defaults, as the operator writes every field; a string is
        # written as given, to test what the gate makes of a hand-written or broken file.
        text = limits if isinstance(limits, str) else json.dumps(_with_defaults(limits))
        (version_dir / "limits.yaml").write_text(text)
        staged = self.root / "..data_tmp"
        staged.symlink_to(version_dir.name)
        os.replace(staged, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/limits.yaml")


def _with_defaults(limits: dict[str, Any]) -> dict[str, Any]:
    """`limits` over the defaults, unvalidated: a test may write a bad value on purpose."""
    document = asdict(Limits())
    concurrency = {**document["concurrency"], **limits.get("concurrency", {})}
    return {**document, **limits, "concurrency": concurrency}


@contextlib.asynccontextmanager
async def gate_in_front_of(
    upstream: str, limits_dir: KubeletLimitsDir, interval: float = 0.05, **config: Any
) -> AsyncIterator[tuple[Gate, str]]:
    """A real gate on a free loopback port; yields it and its base URL. `config`: more GateConfig
    fields (admin_token_file, api_keys_file, planned_kv_tokens)."""
    gate_config = GateConfig(
        listen=("127.0.0.1", 0),
        upstream=upstream,
        limits_path=limits_dir.path,
        interval=interval,
        **config,
    )
    async with running_gate(gate_config) as (gate, addresses):
        yield gate, f"http://127.0.0.1:{addresses[0][1]}"


async def gate_metric(
    session: aiohttp.ClientSession, gate_url: str, name: str, **labels: str
) -> float | None:
    """One sample of the gate's own metrics, read over HTTP as Prometheus would."""
    async with session.get(gate_url + METRICS_PATH) as resp:
        text = await resp.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


def closed_port_url() -> str:
    """A loopback URL nobody listens on (the port was bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextlib.asynccontextmanager
async def held_engine_behind_gate(
    limits_dir: KubeletLimitsDir, **config: Any
) -> AsyncIterator[tuple[HeldEngine, Gate, str, aiohttp.ClientSession]]:
    """The common set-up: a held engine, a gate in front of it, and a client session. `config`: more
    GateConfig fields, as for gate_in_front_of."""
    async with (
        held_engine() as engine,
        gate_in_front_of(engine.url, limits_dir, **config) as (gate, url),
        aiohttp.ClientSession() as session,
    ):
        yield engine, gate, url, session
