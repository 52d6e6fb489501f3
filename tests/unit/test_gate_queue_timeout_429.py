"""Over the limit: a bounded queue, a timeout, then 429 with Retry-After; never a hang."""

from __future__ import annotations

import asyncio

import pytest

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.refusals import Rejected
from tests.unit.gate_harness import (
    KubeletLimitsDir,
    gate_metric,
    held_engine_behind_gate,
    run,
    until,
)


def test_a_queued_request_is_rejected_when_its_wait_times_out():
    async def scenario() -> None:
        admission = Admission(
            parse_limits(
                {
                    "admission": "worstCase",
                    "maxConcurrency": 1,
                    "queueTimeoutSeconds": 0.05,
                    "concurrency": {"min": 1},
                }
            )
        )
        holder = await admission.acquire(1)
        with pytest.raises(Rejected) as raised:
            await admission.acquire(1)
        assert raised.value.reason == "queue_timeout"
        assert "queueTimeoutSeconds=0.05" in str(raised.value)
        assert admission.queue_length == 0
        admission.release(holder)
        admission.release(await admission.acquire(1))
        assert admission.in_flight == 0

    run(scenario())


def test_a_full_queue_rejects_at_once():
    async def scenario() -> None:
        admission = Admission(
            parse_limits(
                {"admission": "worstCase", "maxConcurrency": 1, "maxQueued": 1, "concurrency": {"min": 1}}
            )
        )
        holder = await admission.acquire(1)
        queued = asyncio.create_task(admission.acquire(1))
        await until(lambda: admission.queue_length == 1, "one queued request")
        with pytest.raises(Rejected) as raised:
            await admission.acquire(1)
        assert raised.value.reason == "queue_full"
        admission.release(holder)
        admission.release(await queued)

    run(scenario())


def test_over_the_limit_the_gate_answers_429_with_retry_after(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write(
            {
                "maxConcurrency": 1,
                "maxQueued": 1,
                "queueTimeoutSeconds": 0.2,
                "retryAfterSeconds": 3,
                "concurrency": {"min": 1},
            }
        )
        async with held_engine_behind_gate(limits) as (engine, gate, url, session):
            body = {"text": "hello", "sampling_params": {"max_new_tokens": 8}}
            holder = asyncio.create_task(session.post(url + "/generate", json=body))
            await until(lambda: engine.running == 1, "the first request to reach the engine")
            queued = asyncio.create_task(session.post(url + "/generate", json=body))
            await until(lambda: gate.admission.queue_length == 1, "the second request to queue")
            async with session.post(url + "/generate", json=body) as full:
                assert full.status == 429
                assert full.headers["Retry-After"] == "3"
                assert (await full.json())["error"]["type"] == "queue_full"
            async with await queued as timed_out:
                assert timed_out.status == 429
                assert timed_out.headers["Retry-After"] == "3"
                assert (await timed_out.json())["error"]["type"] == "queue_timeout"
            assert engine.running == 1  # neither rejected request reached the engine
            engine.release.set()
            async with await holder as ok:
                assert ok.status == 200
                assert (await ok.json())["text"] == "ok"
            for reason in ("queue_full", "queue_timeout"):
                assert await gate_metric(session, url, "kvant_gate_rejected_total", reason=reason) == 1
            assert await gate_metric(session, url, "kvant_gate_admitted_total") == 1

    run(scenario())
