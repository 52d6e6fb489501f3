"""Admission by concurrency: in-flight requests never exceed the effective concurrency."""

from __future__ import annotations

import asyncio

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from tests.unit.gate_harness import run, until


def test_in_flight_never_exceeds_effective_concurrency_and_queue_drains_in_order():
    async def scenario() -> None:
        admission = Admission(
            parse_limits({"admission": "worstCase", "maxConcurrency": 3, "concurrency": {"min": 1, "max": 3}})
        )
        assert admission.concurrency == 3
        tickets = [await admission.acquire(1) for _ in range(3)]
        order: list[int] = []

        async def queued(i: int) -> None:
            tickets.append(await admission.acquire(1))
            order.append(i)

        waiters = [asyncio.create_task(queued(i)) for i in range(4)]
        await until(lambda: admission.queue_length == 4, "four queued requests")
        while tickets:
            assert admission.in_flight <= 3
            admission.release(tickets.pop(0))
            await asyncio.sleep(0)
        await asyncio.gather(*waiters)
        assert order == [0, 1, 2, 3]

    run(scenario())


def test_lowering_concurrency_holds_new_requests_until_in_flight_drains():
    async def scenario() -> None:
        admission = Admission(
            parse_limits({"admission": "worstCase", "maxConcurrency": 4, "concurrency": {"min": 1, "max": 4}})
        )
        held = [await admission.acquire(1) for _ in range(3)]
        admission.set_concurrency(2)
        newcomer = asyncio.create_task(admission.acquire(1))
        await until(lambda: admission.queue_length == 1, "the newcomer to wait")
        admission.release(held.pop())
        await asyncio.sleep(0)
        assert not newcomer.done()  # 2 in flight, limit 2: still full
        admission.release(held.pop())
        held.append(await newcomer)
        assert admission.in_flight == 2
        for ticket in held:
            admission.release(ticket)

    run(scenario())
