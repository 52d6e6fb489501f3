"""SSE streams pass through as they are produced: the first event arrives before the engine finishes."""

from __future__ import annotations

import aiohttp

from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, held_engine, run


def test_first_event_reaches_the_client_while_the_engine_still_holds_the_rest(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with held_engine() as engine, gate_in_front_of(engine.url, limits) as (_gate, url):
            body = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 4}
            async with (
                aiohttp.ClientSession() as session,
                session.post(url + "/v1/chat/completions", json=body) as resp,
            ):
                assert resp.status == 200
                assert resp.headers["Content-Type"] == "text/event-stream"
                # The engine sends "second" only after release; a buffering proxy would block here forever.
                first = await resp.content.readuntil(b"\n\n")
                assert b'"first"' in first
                assert engine.running == 1
                engine.release.set()
                rest = await resp.content.read()
                assert b'"second"' in rest and rest.endswith(b"data: [DONE]\n\n")

    run(scenario())
