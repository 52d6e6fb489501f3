"""Admission by KV tokens: Σ (prompt + max new tokens) in flight ≤ the engine's capacity less the
prompt estimate's headroom; targetTokenUsage is the local loop's target, not a cap on reservations."""

from __future__ import annotations

import asyncio

import pytest

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.refusals import Rejected
from kvant_runtime.tokens import ESTIMATE_HEADROOM
from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, held_engine, run, until


def _admission(capacity: int = 1000, **limits: object) -> Admission:
    admission = Admission(parse_limits({"admission": "worstCase", "maxConcurrency": 100, **limits}))
    admission.set_token_capacity(capacity)
    return admission


def test_budget_is_the_capacity_less_the_estimate_headroom_whatever_the_usage_target():
    for target in (0.5, 0.8, 1.0):
        admission = _admission(targetTokenUsage=target)
        assert admission.token_budget == int(1000 * (1 - ESTIMATE_HEADROOM)) == 950
    admission.set_token_capacity(None)
    assert admission.token_budget is None


def test_requests_whose_worst_case_fills_the_cache_are_all_admitted_and_one_more_waits():
    # The protection bench's mix: 400 prompt + 200 new tokens on a 4096-token cache fit 6 at once.
    async def scenario() -> None:
        admission = _admission(capacity=4096, targetTokenUsage=0.8)
        tickets = [await admission.acquire(600) for _ in range(6)]
        assert (admission.in_flight, admission.in_flight_tokens) == (6, 3600)
        seventh = asyncio.create_task(admission.acquire(600))
        await until(lambda: admission.queue_length == 1, "the seventh request to queue")
        admission.release(tickets.pop())
        tickets.append(await seventh)
        for ticket in tickets:
            admission.release(ticket)

    run(scenario())


def test_requests_wait_when_tokens_would_exceed_budget_and_run_when_tokens_free():
    async def scenario() -> None:
        admission = _admission()
        first = await admission.acquire(450)
        second = await admission.acquire(500)
        assert (admission.in_flight, admission.in_flight_tokens) == (2, 950)
        third = asyncio.create_task(admission.acquire(100))
        await until(lambda: admission.queue_length == 1, "the third request to queue")
        assert not third.done()
        admission.release(first)
        ticket = await third
        assert ticket.tokens == 100
        assert (admission.in_flight, admission.in_flight_tokens) == (2, 600)
        admission.release(second)
        admission.release(ticket)
        assert (admission.in_flight, admission.in_flight_tokens) == (0, 0)

    run(scenario())


def test_a_request_larger_than_the_budget_is_refused_with_413_saying_why():
    async def scenario() -> None:
        admission = _admission()
        with pytest.raises(Rejected) as refused:
            await admission.acquire(5000)
        assert refused.value.status == 413 and refused.value.reason == "too_large"
        assert "5000 KV tokens" in str(refused.value) and "budget of 950" in str(refused.value)
        assert admission.in_flight == 0

    run(scenario())


def test_with_run_alone_a_request_larger_than_the_budget_runs_alone_rather_than_never():
    async def scenario() -> None:
        admission = _admission(oversizeRequests="runAlone")
        small = await admission.acquire(10)
        huge = asyncio.create_task(admission.acquire(5000))
        await until(lambda: admission.queue_length == 1, "the huge request to queue")
        admission.release(small)
        ticket = await huge
        assert (admission.in_flight, admission.in_flight_tokens) == (1, 5000)
        blocked = asyncio.create_task(admission.acquire(1))
        await until(lambda: admission.queue_length == 1, "a small request to wait behind the huge one")
        admission.release(ticket)
        admission.release(await blocked)

    run(scenario())


def test_queue_is_strict_fifo_a_large_head_is_not_overtaken():
    async def scenario() -> None:
        admission = _admission()
        holder = await admission.acquire(900)
        large = asyncio.create_task(admission.acquire(500))
        await until(lambda: admission.queue_length == 1, "the large request to queue")
        small = asyncio.create_task(admission.acquire(50))  # would fit now, but is behind
        await until(lambda: admission.queue_length == 2, "the small request to queue")
        assert admission.in_flight == 1
        admission.release(holder)
        first, second = await large, await small
        assert admission.in_flight_tokens == 550
        admission.release(first)
        admission.release(second)

    run(scenario())


def test_unknown_engine_capacity_fails_open_on_tokens_but_not_on_concurrency():
    async def scenario() -> None:
        admission = Admission(
            parse_limits({"admission": "worstCase", "maxConcurrency": 2, "concurrency": {"min": 1, "max": 2}})
        )
        assert admission.token_capacity is None
        a = await admission.acquire(10**9)
        b = await admission.acquire(10**9)
        third = asyncio.create_task(admission.acquire(1))
        await until(lambda: admission.queue_length == 1, "the third request to wait for concurrency")
        admission.release(a)
        admission.release(await third)
        admission.release(b)

    run(scenario())


def test_learning_a_larger_capacity_admits_waiting_requests():
    async def scenario() -> None:
        admission = _admission()
        holder = await admission.acquire(800)
        waiting = asyncio.create_task(admission.acquire(400))
        await until(lambda: admission.queue_length == 1, "the request to queue on tokens")
        admission.set_token_capacity(2000)
        admission.release(await waiting)
        admission.release(holder)

    run(scenario())


def test_capacity_comes_from_server_info_when_metrics_lack_it(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with held_engine() as engine:
            engine.max_total_num_tokens = None
            engine.server_info_tokens = 3000
            async with gate_in_front_of(engine.url, limits) as (gate, _url):
                await until(
                    lambda: gate.admission.token_capacity == 3000, "the capacity from /get_server_info"
                )
                assert gate.admission.token_budget == int(3000 * (1 - ESTIMATE_HEADROOM))

    run(scenario())
