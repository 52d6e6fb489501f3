"""The gate bounds what it holds: admission follows the plan's capacity before the engine reports
one, queued bodies are capped in bytes, and a body that never finishes arriving is cut off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from kvant_runtime.gate import proxy
from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, held_engine, run, until

BODY = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}


def test_before_the_engine_reports_admission_is_bounded_by_the_plan(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with held_engine() as engine:
            engine.max_total_num_tokens = None  # the engine says nothing about its capacity yet
            engine.server_info_tokens = None
            async with (
                gate_in_front_of(engine.url, limits, planned_kv_tokens=500) as (gate, url),
                aiohttp.ClientSession() as session,
            ):
                assert gate.admission.token_capacity == 500
                huge = {"text": "hi", "sampling_params": {"max_new_tokens": 5000}}
                async with session.post(url + "/generate", json=huge) as resp:
                    assert resp.status == 413  # bounded from the first request, not open

    run(scenario())


def test_queued_bodies_are_capped_in_bytes(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 1, "concurrency": {"min": 1}, "maxQueuedBytes": 3000})
        async with (
            held_engine() as engine,
            gate_in_front_of(engine.url, limits) as (gate, url),
            aiohttp.ClientSession() as session,
        ):
            padded = {**BODY, "text": "x" * 1000}

            async def call() -> int:
                async with session.post(url + "/generate", json=padded) as resp:
                    return resp.status

            first = asyncio.create_task(call())
            await until(lambda: engine.running == 1, "the first request at the engine")
            queued = [asyncio.create_task(call()) for _ in range(2)]
            await until(lambda: gate.admission.queue_length == 2, "two bodies in the queue")
            assert await call() == 429  # a third would pass 3000 queued bytes
            engine.release.set()
            assert await first == 200 and [await q for q in queued] == [200, 200]

    run(scenario())


def test_a_body_that_never_finishes_is_cut_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(proxy, "BODY_READ_SECONDS", 0.5)

    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with held_engine() as engine, gate_in_front_of(engine.url, limits) as (_gate, url):
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b'POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"text":')
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), 10)
            assert status.startswith(b"HTTP/1.1 408"), status
            writer.close()
            assert engine.bodies == []

    run(scenario())
