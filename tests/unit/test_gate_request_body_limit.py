"""Request bodies over maxRequestBytes get 413 before they reach admission or the engine."""

from __future__ import annotations

import aiohttp

from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, gate_metric, held_engine, run


def test_oversized_bodies_are_refused_with_413_sized_or_chunked(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxRequestBytes": 1000})
        async with held_engine() as engine, gate_in_front_of(engine.url, limits) as (_gate, url):
            engine.release.set()
            async with aiohttp.ClientSession() as session:
                big = {"text": "x" * 2000}
                async with session.post(url + "/generate", json=big) as resp:
                    assert resp.status == 413
                    assert "maxRequestBytes=1000" in (await resp.json())["error"]["message"]

                async def chunked():
                    for _ in range(4):
                        yield b"y" * 400

                async with session.post(url + "/generate", data=chunked()) as resp:
                    assert resp.status == 413
                async with session.post(url + "/generate", json={"text": "small"}) as resp:
                    assert resp.status == 200
                assert (
                    await gate_metric(session, url, "kvant_gate_rejected_total", reason="body_too_large") == 2
                )
            assert engine.completed == 1

    run(scenario())
