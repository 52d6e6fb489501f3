"""Wires the gate together: listeners, the upstream session, the background loops.

`run_gate` starts everything and runs until told to stop, then drains (`Gate.drain`, see `draining`
and kvant_contracts.drain) and closes; cancelled, it closes at once. Its listeners use aiohttp's handler
cancellation, so a client that disconnects cancels its handler at once: a queued request
leaves the queue, an in-flight one closes its engine connection (SGLang aborts it) and
gives its slot back.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kvant_contracts.drain import DRAIN_QUIET_SECONDS, GATE_CLOSE_SECONDS, GATE_DRAIN_PATH
from kvant_contracts.limits import Limits, LimitsError, parse_limits_text
from kvant_contracts.serving_pod import ENGINE_HEALTH_PATH, ENGINE_HEALTH_SECONDS, GATE_METRICS_PATH
from kvant_runtime.gate import draining
from kvant_runtime.gate.access import Access
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.concurrency import ConcurrencyController
from kvant_runtime.gate.draining import SHUTDOWN_GRACE_SECONDS, Traffic
from kvant_runtime.gate.forecast import OutputForecast
from kvant_runtime.gate.gate_metrics import GateMetrics, bind_forecast, bind_prompt_counter
from kvant_runtime.gate.limits_source import LimitsFile, LimitsSource
from kvant_runtime.gate.limits_watch import ConfigMapWatch, LimitsConfigMap
from kvant_runtime.gate.loops import EngineLoadLoop, LimitsFollower, LocalLoop, watch_limits
from kvant_runtime.gate.port_relay import RelayConfig, running_relay
from kvant_runtime.gate.proxy import Proxy
from kvant_runtime.http_body import read_up_to
from kvant_runtime.image_tokens import load_image_processor
from kvant_runtime.prompt_counter import load_counter

log = logging.getLogger("kvant.gate")

METRICS_PATH = GATE_METRICS_PATH
# The engine listens on the pod's loopback only, so the metrics listener is the pod's one window onto
# it: /metrics carries the gate's series followed by the engine's (metrics merging, as Istio's sidecar
# does), and /engine/health serves the engine container's probes. Both are read-only GETs.
_ENGINE_READ_TIMEOUT = 5.0
_ENGINE_METRICS_MAX_BYTES = 16 << 20
# Connection reuse to the engine matters for latency; the gate's admission, not the pool, limits load.
# Idle connections close before SGLang closes them (SGLANG_TIMEOUT_KEEP_ALIVE, 5 s by default), so
# a request is never sent on a connection the engine is closing at that moment.
KEEPALIVE_SECONDS = 4.0


@dataclass(frozen=True)
class GateConfig:
    listen: tuple[str, int]
    upstream: str
    limits_path: Path
    metrics_listen: tuple[str, int] | None = None
    interval: float = 1.0  # seconds between limits reloads and engine metric reads
    admin_token_file: Path | None = None  # unset: admin routes are closed
    # The plan's KV tokens per replica: the token budget until the engine reports its own, so
    # admission is bounded from the first request, not open while the engine starts.
    planned_kv_tokens: int | None = None
    api_keys_file: Path | None = None  # unset: clients need no key
    relay: RelayConfig | None = None  # prefill/decode: the bootstrap port, pod IP -> engine (port_relay)
    limits_configmap: LimitsConfigMap | None = None  # unset: the limits file is the only source
    tokenizer: Path | None = None  # the served folder: its tokenizer counts prompts (prompt_counter)
    trust_remote_code: bool = False  # the folder's own tokenizer code may run, as in the engine
    # The most the drain lasts; under it, the live limits' own deadline (kvant_contracts.drain).
    drain_seconds: float = SHUTDOWN_GRACE_SECONDS
    drain_quiet_seconds: float = DRAIN_QUIET_SECONDS


class Gate:
    """One gate's live state; `apply_limits` is how new limits enter it."""

    def __init__(self, config: GateConfig, limits: Limits) -> None:
        self.config = config
        self.admission = Admission(limits)
        self.admission.set_token_capacity(config.planned_kv_tokens)
        self.controller = ConcurrencyController(limits)
        self.metrics = GateMetrics(self.admission)
        self.forecast = OutputForecast()
        self.admission.set_margin(self._forecast_margin)
        bind_forecast(self.metrics, self.forecast, self.admission)
        self.counter = load_counter(config.tokenizer, trust_remote_code=config.trust_remote_code)
        self.images = load_image_processor(config.tokenizer)
        bind_prompt_counter(self.metrics, self.counter)
        self.traffic = Traffic()
        log.info(
            "event=prompt_counter exact=%s images=%s folder=%s",
            self.counter.exact,
            self.images.name if self.images else "none",
            config.tokenizer,
        )

    def _forecast_margin(self, sequences: int) -> int:
        """The forecast's allowance for the in-flight total's spread, in forecast admission only."""
        limits = self.admission.limits
        if limits.admission != "forecast":
            return 0
        return self.forecast.margin(sequences, limits.forecastQuantile)

    def apply_limits(self, limits: Limits) -> None:
        change = self.controller.set_limits(limits)
        self.admission.set_limits(limits)
        self.admission.set_concurrency(self.controller.value)
        if change is not None:
            log.info("event=concurrency_clamped reason=%r", change.reason)

    async def metrics_handler(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def drain_handler(self, _request: web.Request) -> web.Response:
        """Whether the gate drains, for the engine's preStop hook (kvant_contracts.drain)."""
        return web.json_response(draining.drain_status(self.traffic, self.admission))

    async def drain(self) -> str:
        """Drains (`draining.drain`) until what it holds has ended, for at most the configured
        ceiling (not an estimate from the limits: kvant_contracts.drain); returns how it ended: "idle"
        or "deadline"."""
        seconds = self.config.drain_seconds
        return await draining.drain(self.traffic, self.admission, seconds, self.config.drain_quiet_seconds)


class EngineWindow:
    """The metrics listener's read-only view of the engine: merged /metrics and /engine/health."""

    def __init__(self, gate: Gate, session: aiohttp.ClientSession, upstream: str) -> None:
        self.gate, self.session, self.upstream = gate, session, upstream.rstrip("/")

    async def merged_metrics(self, _request: web.Request) -> web.Response:
        own = generate_latest(self.gate.metrics.registry)
        try:
            status, engine = await self._get("/metrics")
        except EngineUnreachable:
            status, engine = 0, b""
        # An engine that cannot be read adds nothing; kvant_gate_engine_metrics_stale says so.
        merged = own if status != 200 else own.rstrip(b"\n") + b"\n" + engine
        return web.Response(body=merged, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def engine_health(self, _request: web.Request) -> web.Response:
        try:
            status, body = await self._get("/health", ENGINE_HEALTH_SECONDS)
        except EngineUnreachable as err:
            return web.Response(status=503, text=f"engine unreachable: {err}\n")
        return web.Response(status=status, body=body)

    async def _get(self, path: str, seconds: float = _ENGINE_READ_TIMEOUT) -> tuple[int, bytes]:
        timeout = aiohttp.ClientTimeout(total=seconds)
        try:
            async with self.session.get(f"{self.upstream}{path}", timeout=timeout) as resp:
                body = await read_up_to(resp, _ENGINE_METRICS_MAX_BYTES)
                if len(body) > _ENGINE_METRICS_MAX_BYTES:
                    raise EngineUnreachable(
                        f"GET {path} answered more than {_ENGINE_METRICS_MAX_BYTES} bytes"
                    )
                return resp.status, body
        except (aiohttp.ClientError, TimeoutError) as err:
            raise EngineUnreachable(f"GET {path} failed: {err!r}") from err


class EngineUnreachable(Exception):
    pass


@contextlib.asynccontextmanager
async def running_gate(config: GateConfig) -> AsyncIterator[tuple[Gate, list[tuple[str, int]]]]:
    """Starts a gate; yields it and the addresses it listens on (proxy first, then metrics)."""
    limits_file = LimitsFile(config.limits_path, config.interval)
    first = limits_file.read()
    if first.content is None:
        raise LimitsError(first.problem)
    gate = Gate(config, parse_limits_text(first.content, first.where))
    sources: list[LimitsSource] = [limits_file]
    if config.limits_configmap is not None:
        sources.append(ConfigMapWatch(config.limits_configmap))
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0)
    # A proxy forwards bytes: no cookie jar shared between clients, no headers the client did not
    # send (aiohttp would add Accept-Encoding and get answers compressed that nobody asked for).
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
    ) as session:
        access = Access(config.admin_token_file, config.api_keys_file)
        proxy = Proxy(
            config.upstream,
            gate.admission,
            gate.metrics,
            session,
            access=access,
            forecast=gate.forecast,
            counter=gate.counter,
            traffic=gate.traffic,
            images=gate.images,
        )
        app = web.Application()
        app.router.add_get(METRICS_PATH, gate.metrics_handler)
        app.router.add_get(GATE_DRAIN_PATH, gate.drain_handler)
        app.router.add_route("*", "/{tail:.*}", proxy.handle)
        apps = [(app, config.listen)]
        if config.metrics_listen is not None:
            window = EngineWindow(gate, session, config.upstream)
            metrics_app = web.Application()
            metrics_app.router.add_get("/metrics", window.merged_metrics)
            metrics_app.router.add_get(ENGINE_HEALTH_PATH, window.engine_health)
            apps.append((metrics_app, config.metrics_listen))
        async with contextlib.AsyncExitStack() as stack:
            addresses = [await stack.enter_async_context(_serving(a, address)) for a, address in apps]
            if config.relay is not None:
                await stack.enter_async_context(running_relay(config.relay))
            loop = LocalLoop(
                session,
                config.upstream,
                admission=gate.admission,
                controller=gate.controller,
                metrics=gate.metrics,
                interval=config.interval,
                forecast=gate.forecast,
            )
            tasks = [
                asyncio.create_task(loop.run(), name="gate-local-loop"),
                asyncio.create_task(
                    EngineLoadLoop(session, config.upstream, gate.admission).run(), name="gate-engine-load"
                ),
                asyncio.create_task(
                    watch_limits(sources, LimitsFollower(first.content, gate.apply_limits, gate.metrics)),
                    name="gate-limits-reload",
                ),
            ]
            # Start-up objects (imports, app) live forever: moving them out of the collector's sight
            # keeps a full collection from stalling the proxy for tens of milliseconds (a p99 spike).
            gc.freeze()
            try:
                yield gate, addresses
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)


async def run_gate(config: GateConfig, stop: asyncio.Event | None = None) -> None:
    """Serves until `stop` is set (SIGTERM/SIGINT in `kvant gate`), then drains and closes; cancelled,
    it closes at once."""
    async with running_gate(config) as (gate, addresses):
        log.info(
            "event=gate_started listen=%s upstream=%s limits=%s limits_configmap=%s metrics=%s",
            _address(addresses[0]),
            config.upstream,
            config.limits_path,
            _configmap(config.limits_configmap),
            f"{_address(addresses[-1])}{METRICS_PATH if len(addresses) == 1 else '/metrics'}",
        )
        log.info("event=limits_loaded limits=%s", gate.admission.limits)
        await (stop or asyncio.Event()).wait()
        await gate.drain()


async def serve_until_signalled(config: GateConfig) -> None:
    """`run_gate` until SIGTERM or SIGINT, then drains (at most `config.drain_seconds`); a second
    signal closes at once."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_gate(config, stop))

    def signalled() -> None:
        if stop.is_set():
            task.cancel()
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signalled)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    log.info("event=gate_stopped")


@contextlib.asynccontextmanager
async def _serving(app: web.Application, address: tuple[str, int]) -> AsyncIterator[tuple[str, int]]:
    # In-flight requests had their time in the drain; one still running at its deadline is cut short.
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=GATE_CLOSE_SECONDS
    )
    await runner.setup()
    sock = socket.create_server(address, reuse_port=False)
    try:
        await web.SockSite(runner, sock, backlog=1024).start()
        bound = sock.getsockname()
        yield bound[0], bound[1]
    finally:
        await runner.cleanup()
        sock.close()


def _configmap(target: LimitsConfigMap | None) -> str:
    return "none" if target is None else f"{target.namespace}/{target.name}@{target.api.url}"


def _address(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"
