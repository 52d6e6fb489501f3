"""The protection bench's anchor re-states GIE's saturation rule for one engine: saturated when the
waiting queue passes 5, KV utilisation passes 0.8 or the metrics are older than 200 ms; then a
/generate gets 429 at once and everything else is forwarded. Against the simulator's /v1/loads."""

from __future__ import annotations

import time

import aiohttp
from bench.protection.saturation_detector import Detector, app

from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import run, serving, until


def test_the_rule_is_gies_defaults() -> None:
    detector = Detector("http://127.0.0.1:1")
    assert detector.saturated()  # never scraped: stale
    detector.fresh_at = time.monotonic()
    assert not detector.saturated()
    detector.queue = 6
    assert detector.saturated()
    detector.queue, detector.kv = 5, 0.81
    assert detector.saturated()
    detector.kv = 0.8
    assert not detector.saturated()
    detector.fresh_at = time.monotonic() - 0.3
    assert detector.saturated()


def test_it_forwards_while_the_engine_has_room_and_sheds_when_it_cannot_read_it() -> None:
    engine = Engine(EngineConfig(kv_tokens=10_000, max_running_requests=8, context_length=4096))
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4}}

    async def generate(session: aiohttp.ClientSession, url: str) -> int:
        async with session.post(url + "/generate", json=body) as resp:
            await resp.read()
            return resp.status

    async def scenario() -> None:
        async with (
            serving(SimServer(engine, ServerInfo("tiny")).app()) as engine_url,
            serving(app(engine_url)) as url,
            aiohttp.ClientSession() as session,
        ):

            async def passes() -> bool:
                return await generate(session, url) == 200

            await until(passes, "a fresh scrape of an idle engine to let a request through")
            async with session.get(url + "/get_server_info") as resp:
                assert resp.status == 200  # not a generating route: always forwarded
        # No engine: its metrics stay stale and every /generate is shed.
        async with serving(app("http://127.0.0.1:1")) as url, aiohttp.ClientSession() as session:
            assert [await generate(session, url) for _ in range(3)] == [429] * 3

    run(scenario())
