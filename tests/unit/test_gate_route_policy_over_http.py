"""The route policy through a real gate: admin routes never reach the engine, unknown routes are
refused, every generating route waits for admission, and what the gate reserved is what it forwards."""

from __future__ import annotations

import asyncio

from kvant_contracts.tenancy import ENGINE_PRIORITY
from tests.unit.gate_harness import KubeletLimitsDir, held_engine_behind_gate, run, until

BODY = {"text": "hello", "sampling_params": {"max_new_tokens": 16}}


def test_admin_and_unknown_routes_are_refused_before_the_engine(tmp_path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with held_engine_behind_gate(limits) as (engine, _gate, url, session):
            async with session.post(url + "/flush_cache") as resp:
                assert resp.status == 403
                assert "admin routes are closed at the gate" in (await resp.json())["error"]["message"]
            async with session.post(url + "/update_weights_from_disk", json={"model_path": "/x"}) as resp:
                assert resp.status == 403
            async with session.get(url + "/no/such/route") as resp:
                assert resp.status == 404
            async with session.delete(url + "/generate") as resp:
                assert resp.status == 404
            async with session.get(url + "/health") as resp:
                assert resp.status == 200  # read-only routes pass
            # (the gate's own loop scrapes /metrics meanwhile)
            assert [seen for seen in engine.seen if seen[1] not in ("/metrics", "/v1/loads")] == [
                ("GET", "/health")
            ]

    run(scenario())


def test_put_generate_waits_for_admission_like_post(tmp_path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 1, "concurrency": {"min": 1}})
        async with held_engine_behind_gate(limits) as (engine, gate, url, session):

            async def call(method: str) -> int:
                async with session.request(method, url + "/generate", json=BODY) as resp:
                    return resp.status

            first = asyncio.create_task(call("POST"))
            await until(lambda: engine.running == 1, "the first request at the engine")
            second = asyncio.create_task(call("PUT"))
            await until(lambda: gate.admission.queue_length == 1, "PUT /generate to queue at the gate")
            assert engine.running == 1
            engine.release.set()
            assert await first == 200 and await second == 200
            assert ("PUT", "/generate") in engine.seen

    run(scenario())


def test_a_chat_without_a_limit_is_forwarded_with_the_reserved_one(tmp_path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"defaultMaxTokens": 300})
        async with held_engine_behind_gate(limits) as (engine, _gate, url, session):
            engine.release.set()
            chat = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with session.post(url + "/v1/chat/completions", json=chat) as resp:
                assert resp.status == 200
                await resp.read()
            # With the class's engine priority, which the gate writes on every request.
            assert engine.bodies == [{**chat, "max_tokens": 300, "priority": ENGINE_PRIORITY["standard"]}]

    run(scenario())


def test_a_request_larger_than_the_replica_is_413_and_never_reaches_the_engine(tmp_path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({})
        async with held_engine_behind_gate(limits) as (engine, gate, url, session):
            await until(lambda: gate.admission.token_budget is not None, "the engine's capacity")
            huge = {"text": "hello", "sampling_params": {"max_new_tokens": 100_000}}
            async with session.post(url + "/generate", json=huge) as resp:
                assert resp.status == 413
                assert "more than this replica's whole budget" in (await resp.json())["error"]["message"]
            assert engine.bodies == []

    run(scenario())
