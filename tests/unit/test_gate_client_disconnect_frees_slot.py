"""A client that goes away frees its slot at once: queued or in flight, and the engine sees the abort."""

from __future__ import annotations

import asyncio

import aiohttp

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, held_engine, run, until

BODY = {"text": "hello", "sampling_params": {"max_new_tokens": 16}}


def test_a_cancelled_waiter_leaves_the_queue_and_unblocks_the_next():
    async def scenario() -> None:
        admission = Admission(parse_limits({"admission": "worstCase", "maxConcurrency": 100}))
        admission.set_token_capacity(1000)
        holder = await admission.acquire(600)
        big = asyncio.create_task(admission.acquire(600))  # blocks the head of the queue
        await until(lambda: admission.queue_length == 1, "the big request to queue")
        small = asyncio.create_task(admission.acquire(100))
        await until(lambda: admission.queue_length == 2, "the small request to queue behind it")
        big.cancel()
        ticket = await small  # the head left, so the small one fits now
        assert (admission.queue_length, admission.in_flight, admission.in_flight_tokens) == (0, 2, 700)
        admission.release(ticket)
        admission.release(holder)

    run(scenario())


def test_disconnects_free_queued_and_in_flight_slots(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 1, "concurrency": {"min": 1}})
        async with held_engine() as engine, gate_in_front_of(engine.url, limits) as (gate, url):
            async with aiohttp.ClientSession() as first, aiohttp.ClientSession() as second:
                in_flight = asyncio.create_task(first.post(url + "/generate", json=BODY))
                await until(lambda: engine.running == 1, "the first request to reach the engine")
                queued = asyncio.create_task(second.post(url + "/generate", json=BODY))
                await until(lambda: gate.admission.queue_length == 1, "the second request to queue")

                queued.cancel()
                await second.close()  # the client hangs up while waiting
                await until(lambda: gate.admission.queue_length == 0, "the gate to drop the queued request")
                assert gate.admission.in_flight == 1

                in_flight.cancel()
                await first.close()  # the client hangs up mid-generation
                await until(lambda: gate.admission.in_flight == 0, "the gate to free the in-flight slot")
                await until(lambda: engine.aborted == 1, "the engine to see the request aborted")

            async with aiohttp.ClientSession() as third:
                engine.release.set()
                async with third.post(url + "/generate", json=BODY) as resp:
                    assert resp.status == 200
            assert engine.completed == 1

    run(scenario())
