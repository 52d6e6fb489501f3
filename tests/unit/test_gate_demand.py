"""The gate's demand: what its replica is asked to hold over what it may hold now, the larger of the
token and request measures; 1 is exactly full, above 1 requests wait (kvant_contracts.autoscaling)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvant_contracts.autoscaling import DEMAND_GAUGE
from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.gate_metrics import GateMetrics
from kvant_runtime.tokens import ESTIMATE_HEADROOM
from tests.unit.gate_harness import run, until

BUDGET = int(1000 * (1 - ESTIMATE_HEADROOM))


def _admission(capacity: int | None = 1000, concurrency: int = 10) -> Admission:
    admission = Admission(
        parse_limits({"admission": "worstCase", "maxConcurrency": concurrency, "maxQueued": 10})
    )
    admission.set_token_capacity(capacity)
    return admission


def test_an_idle_replica_has_no_demand():
    assert _admission().demand == 0.0
    assert _admission(capacity=None).demand == 0.0


def test_demand_rises_with_the_tokens_in_flight():
    async def scenario() -> None:
        admission = _admission()
        first = await admission.acquire(BUDGET // 4)
        assert admission.demand == pytest.approx((BUDGET // 4) / BUDGET)
        second = await admission.acquire(BUDGET // 4)
        # Two of ten requests is 0.2; half the budget is more, and the larger measure counts.
        assert admission.demand == pytest.approx(2 * (BUDGET // 4) / BUDGET)
        admission.release(first)
        admission.release(second)
        assert admission.demand == 0.0

    run(scenario())


def test_queued_tokens_count_as_demand():
    async def scenario() -> None:
        admission = _admission()
        held = await admission.acquire(800)
        waiting = asyncio.create_task(admission.acquire(600))  # does not fit beside the 800
        await until(lambda: admission.queue_length == 1, "the second request to queue")
        assert admission.queued_tokens == 600
        assert admission.demand == pytest.approx(1400 / BUDGET)
        admission.release(held)
        admission.release(await waiting)

    run(scenario())


def test_requests_count_against_the_effective_concurrency_and_narrowing_it_raises_demand():
    async def scenario() -> None:
        admission = _admission(capacity=None, concurrency=8)
        tickets = [await admission.acquire(1) for _ in range(2)]
        assert admission.demand == pytest.approx(2 / 8)
        admission.set_concurrency(4)  # the local protection loop narrows it
        assert admission.demand == pytest.approx(2 / 4)
        for ticket in tickets:
            admission.release(ticket)

    run(scenario())


def test_demand_is_above_one_when_requests_queue():
    async def scenario() -> None:
        admission = _admission(concurrency=2)
        tickets = [await admission.acquire(10) for _ in range(2)]
        assert admission.demand == pytest.approx(1.0)  # exactly full: nothing waits
        waiting = [asyncio.create_task(admission.acquire(10)) for _ in range(2)]
        await until(lambda: admission.queue_length == 2, "two requests to queue")
        assert admission.demand == pytest.approx(4 / 2)
        for ticket in tickets:
            admission.release(ticket)
        for ticket in await asyncio.gather(*waiting):
            admission.release(ticket)

    run(scenario())


def test_the_demand_gauge_reads_the_live_admission_state():
    async def scenario() -> None:
        admission = _admission(capacity=None, concurrency=4)
        metrics = GateMetrics(admission)

        def exported() -> float:
            for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
                if family.name == DEMAND_GAUGE:
                    assert family.type == "gauge" and family.documentation
                    return float(family.samples[0].value)
            raise AssertionError(f"{DEMAND_GAUGE} is not in the registry")

        assert exported() == 0.0
        ticket = await admission.acquire(1)
        assert exported() == pytest.approx(1 / 4)
        admission.release(ticket)

    run(scenario())
