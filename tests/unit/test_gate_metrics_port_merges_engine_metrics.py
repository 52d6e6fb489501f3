"""The gate's metrics port is the pod's read-only window onto an engine that listens on loopback:
/metrics carries the gate's series then the engine's, parseable as one exposition, and
/engine/health is the engine's /health (503 when it cannot be reached)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from kvant_contracts.serving_pod import ENGINE_HEALTH_PATH
from kvant_runtime.gate.gate_server import GateConfig, running_gate
from tests.unit.gate_harness import KubeletLimitsDir, closed_port_url, held_engine, run, serving


@contextlib.asynccontextmanager
async def metrics_port(upstream: str, limits: KubeletLimitsDir) -> AsyncIterator[str]:
    config = GateConfig(
        listen=("127.0.0.1", 0), upstream=upstream, limits_path=limits.path, metrics_listen=("127.0.0.1", 0)
    )
    async with running_gate(config) as (_gate, addresses):
        yield f"http://127.0.0.1:{addresses[-1][1]}"


async def _families(session: aiohttp.ClientSession, url: str) -> set[str]:
    async with session.get(f"{url}/metrics") as resp:
        assert resp.status == 200
        return {family.name for family in text_string_to_metric_families(await resp.text())}


def test_metrics_port_serves_gate_then_engine_series_and_engine_health(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with (
            held_engine() as engine,
            metrics_port(engine.url, limits) as url,
            aiohttp.ClientSession() as session,
        ):
            families = await _families(session, url)
            assert {"kvant_gate_admitted", "kvant_gate_effective_concurrency"} <= families
            assert {"sglang:token_usage", "sglang:num_retracted_requests"} <= families
            async with session.get(url + ENGINE_HEALTH_PATH) as health:
                assert health.status == 200 and await health.text() == "ok"

    run(scenario())


def test_unreachable_engine_leaves_the_gate_series_and_fails_engine_health(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with metrics_port(closed_port_url(), limits) as url, aiohttp.ClientSession() as session:
            families = await _families(session, url)
            assert "kvant_gate_engine_metrics_stale" in families
            assert not any(name.startswith("sglang:") for name in families)
            async with session.get(url + ENGINE_HEALTH_PATH) as health:
                assert health.status == 503 and "engine unreachable" in await health.text()

    run(scenario())


def test_a_page_the_engine_sends_in_pieces_is_merged_whole(tmp_path):
    """SGLang's /metrics runs to hundreds of kilobytes and arrives in pieces: the merged page carries it
    to its last line (it used to stop at what had arrived by the first read, cut mid-line)."""
    series = [f'sglang:test_series{{n="{n}"}} {n}.0\n' for n in range(20_000)]
    page = ("# TYPE sglang:test_series gauge\n" + "".join(series)).encode()

    async def metrics(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        half = len(page) // 2 + 7  # mid-line
        await response.write(page[:half])
        await asyncio.sleep(0.2)
        await response.write(page[half:])
        await response.write_eof()
        return response

    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        async with (
            serving(app) as engine,
            metrics_port(engine, limits) as url,
            aiohttp.ClientSession() as session,
            session.get(f"{url}/metrics") as resp,
        ):
            text = await resp.text()
        values = [
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "sglang:test_series"
        ]
        assert len(values) == len(series) and values[-1] == len(series) - 1

    run(scenario())
