"""Against the engine simulator: the gate keeps its KV cache from being overrun.

The control run sends the same burst straight to the simulator, which admits on prompt
size only (as SGLang does) and then has to retract mid-decode. The burst's requests come 10 ms
apart: SGLang admits nothing more once a request did not fit (its batch is full until one leaves),
so equal requests arriving at once fill the cache and finish together, while a request arriving as
the earlier ones decode is admitted against what they hold now, not what they will grow to. Through
the gate nothing is
retracted and every request completes: in `engine` admission because it lets through nothing whose
growth could overflow the cache (admit.kv_peak), in `worstCase` because the reservations in flight
stay within the token budget (95% of the simulator's capacity).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from kvant_runtime.gate.engine_metrics import parse_engine_metrics
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from kvant_runtime.tokens import ESTIMATE_HEADROOM
from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, gate_metric, run, serving, until

KV_TOKENS = 1000
# 400 ASCII characters ≈ 100 prompt tokens, + 100 new tokens: 200 KV tokens per request at the end.
BODY = {"text": "x" * 400, "sampling_params": {"max_new_tokens": 100}}
# Shapes that hold more than one sequence: 4 parallel samples share the prompt (100 + 4 x 100), and a
# batch of 3 prompts holds 3 x (100 + 100). The gate must cost them at that, or the engine retracts.
SHAPES = {
    "single": BODY,
    "n4": {"text": "x" * 400, "sampling_params": {"max_new_tokens": 100, "n": 4}},
    "batch3": {"text": ["x" * 400, "y" * 400, "z" * 400], "sampling_params": {"max_new_tokens": 100}},
}
BURST = 10
# 100 steps of 1 ms: a request decodes for ~0.1 s, so the burst's later requests, SPACING_S apart,
# arrive while the earlier ones decode.
FAST = CostModel(decode_base_s=0.001, decode_per_request_s=0.0, prefill_per_token_s=0.0)
SPACING_S = 0.01


def _simulator() -> SimServer:
    # new_token_ratio=0: running requests reserve none of their remaining output, so the engine
    # admits more of an unprotected burst than can finish and has to retract.
    config = EngineConfig(
        kv_tokens=KV_TOKENS, max_running_requests=64, context_length=4096, new_token_ratio=0.0, cost=FAST
    )
    return SimServer(Engine(config), ServerInfo("tiny"))


async def _retracted(session: aiohttp.ClientSession, engine_url: str) -> float:
    async with session.get(engine_url + "/metrics") as resp:
        return parse_engine_metrics(await resp.text()).retracted_total


async def _burst(session: aiohttp.ClientSession, url: str, body: dict) -> list[int]:
    """BURST requests, SPACING_S apart: each later one arrives while the earlier ones decode."""

    async def one(delay: float) -> int:
        await asyncio.sleep(delay)
        async with session.post(url + "/generate", json=body) as resp:
            await resp.read()
            return resp.status

    return list(await asyncio.gather(*(one(i * SPACING_S) for i in range(BURST))))


@pytest.mark.parametrize("admission", ["engine", "worstCase"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_direct_burst_retracts_but_through_the_gate_it_does_not(tmp_path, shape, admission):
    body = SHAPES[shape]

    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 64, "admission": admission, "concurrency": {"min": 1}})
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            async with serving(_simulator().app()) as direct_url:
                assert await _burst(session, direct_url, body) == [200] * BURST
                assert await _retracted(session, direct_url) > 0  # the control: the cache was overrun

            async with (
                serving(_simulator().app()) as engine_url,
                gate_in_front_of(engine_url, limits) as (
                    gate,
                    url,
                ),
            ):
                await until(
                    lambda: gate.admission.token_capacity == KV_TOKENS, "the gate to learn the capacity"
                )
                budget = gate.admission.token_budget
                assert budget == int(KV_TOKENS * (1 - ESTIMATE_HEADROOM))
                peak_tokens = 0

                async def watch() -> None:
                    nonlocal peak_tokens
                    while True:
                        peak_tokens = max(peak_tokens, gate.admission.in_flight_tokens)
                        await asyncio.sleep(0)

                watcher = asyncio.create_task(watch())
                statuses = await _burst(session, url, body)
                watcher.cancel()
                assert statuses == [200] * BURST
                assert await _retracted(session, engine_url) == 0
                if admission == "worstCase":
                    assert 0 < peak_tokens <= budget
                assert await gate_metric(session, url, "kvant_gate_admitted_total") == BURST

    run(scenario())
