"""`observe` admits everything and counts what enforce would have held; `off` just proxies."""

from __future__ import annotations

import asyncio

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from tests.unit.gate_harness import (
    KubeletLimitsDir,
    gate_metric,
    held_engine_behind_gate,
    run,
    until,
)


def test_observe_admits_over_both_limits_and_names_them():
    async def scenario() -> None:
        admission = Admission(
            parse_limits(
                {"admission": "worstCase", "mode": "observe", "maxConcurrency": 1, "concurrency": {"min": 1}}
            )
        )
        admission.set_token_capacity(100)
        first = await admission.acquire(80)
        second = await admission.acquire(80)
        assert first.over_limits == ()
        assert second.over_limits == ("concurrency", "token_budget")
        assert (admission.in_flight, admission.in_flight_tokens) == (2, 160)

    run(scenario())


def test_switching_from_enforce_to_off_releases_the_queue():
    async def scenario() -> None:
        admission = Admission(
            parse_limits({"admission": "worstCase", "maxConcurrency": 1, "concurrency": {"min": 1}})
        )
        holder = await admission.acquire(1)
        queued = [asyncio.create_task(admission.acquire(1)) for _ in range(3)]
        await until(lambda: admission.queue_length == 3, "three queued requests")
        admission.set_limits(
            parse_limits(
                {"admission": "worstCase", "mode": "off", "maxConcurrency": 1, "concurrency": {"min": 1}}
            )
        )
        tickets = await asyncio.gather(*queued)
        assert all(t.over_limits == () for t in tickets)
        assert admission.in_flight == 4
        for ticket in [holder, *tickets]:
            admission.release(ticket)

    run(scenario())


def test_observe_mode_over_http_counts_without_holding(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"mode": "observe", "maxConcurrency": 1, "concurrency": {"min": 1}})
        async with held_engine_behind_gate(limits) as (engine, gate, url, session):
            body = {"text": "hi", "max_tokens": 1}
            calls = [asyncio.create_task(session.post(url + "/generate", json=body)) for _ in range(3)]
            await until(lambda: engine.running == 3, "all three requests at the engine")
            assert gate.admission.queue_length == 0
            assert await gate_metric(session, url, "kvant_gate_mode", mode="observe") == 1
            assert await gate_metric(session, url, "kvant_gate_mode", mode="enforce") == 0
            over = await gate_metric(
                session, url, "kvant_gate_observed_over_limit_total", limit="concurrency"
            )
            assert over == 2
            engine.release.set()
            for call in calls:
                async with await call as resp:
                    assert resp.status == 200

    run(scenario())
