"""With the engine down the gate answers 503 with Retry-After at once, and /health says so."""

from __future__ import annotations

import aiohttp

from tests.unit.gate_harness import (
    KubeletLimitsDir,
    closed_port_url,
    gate_in_front_of,
    gate_metric,
    held_engine_behind_gate,
    run,
)


def test_engine_down_means_503_and_unhealthy(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"retryAfterSeconds": 2})
        engine_url = closed_port_url()
        async with gate_in_front_of(engine_url, limits) as (_gate, url), aiohttp.ClientSession() as session:
            for path in ("/generate", "/v1/chat/completions"):
                async with session.post(url + path, json={"text": "hi"}) as resp:
                    assert resp.status == 503
                    assert resp.headers["Retry-After"] == "2"
                    error = (await resp.json())["error"]
                    assert error["type"] == "engine_unavailable"
                    assert engine_url in error["message"]
            async with session.get(url + "/health") as health:
                assert health.status == 503
            assert (
                await gate_metric(session, url, "kvant_gate_rejected_total", reason="engine_unavailable") == 3
            )
            assert await gate_metric(session, url, "kvant_gate_in_flight_requests") == 0

    run(scenario())


def test_health_passes_the_engine_health_through(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with (
            held_engine_behind_gate(limits) as (_engine, _gate, url, session),
            session.get(url + "/health") as health,
        ):
            assert health.status == 200
            assert await health.text() == "ok"

    run(scenario())
