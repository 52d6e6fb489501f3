"""The gate forwards the client's headers and the engine's answer as they are, and adds none of its own."""

from __future__ import annotations

import aiohttp

from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, held_engine, run

# This client sends only the headers a test names.
BARE = ("User-Agent", "Accept", "Accept-Encoding")


def test_headers_pass_both_ways_without_additions_or_shared_cookies(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with held_engine() as engine:
            # By host name: a cookie jar would keep cookies from it (aiohttp's ignores bare IPs).
            by_name = engine.url.replace("127.0.0.1", "localhost")
            async with gate_in_front_of(by_name, limits) as (_gate, url):
                async with aiohttp.ClientSession(skip_auto_headers=BARE) as client:
                    sent = {"Authorization": "Bearer k", "X-Request-Id": "r-1"}
                    async with client.get(url + "/v1/models?x=1", headers=sent) as resp:
                        seen = await resp.json()
                        assert resp.headers["X-Engine"] == "held"
                        assert "session=from-engine" in resp.headers["Set-Cookie"]
                assert seen["authorization"] == "Bearer k"
                assert seen["x-request-id"] == "r-1"
                assert "accept-encoding" not in seen
                assert "user-agent" not in seen
                # One client's cookie never rides along on another client's request.
                async with (
                    aiohttp.ClientSession(skip_auto_headers=BARE) as other_client,
                    other_client.get(url + "/v1/models") as resp,
                ):
                    assert "cookie" not in await resp.json()

    run(scenario())
