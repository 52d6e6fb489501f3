"""Limits follow the mounted file live: no restart, no dropped request, no reset connection."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.unit.gate_harness import (
    KubeletLimitsDir,
    gate_in_front_of,
    gate_metric,
    held_engine,
    held_engine_behind_gate,
    run,
    until,
)

BODY = {"text": "hello", "sampling_params": {"max_new_tokens": 16}}


def test_raising_max_concurrency_under_load_admits_the_queue_and_every_request_completes(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 2, "maxQueued": 100, "concurrency": {"min": 1}})
        async with held_engine() as engine, gate_in_front_of(engine.url, limits) as (gate, url):
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:

                async def call(path: str) -> tuple[int, str]:
                    payload = {
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 16,
                        "stream": True,
                    }
                    body = BODY if path == "/generate" else payload
                    async with session.post(url + path, json=body) as resp:
                        return resp.status, await resp.text()

                paths = ["/generate", "/v1/chat/completions"] * 6
                calls = [asyncio.create_task(call(p)) for p in paths]
                await until(lambda: engine.running == 2, "two requests at the engine")
                await until(lambda: gate.admission.queue_length == 10, "ten requests queued")

                limits.write({"maxConcurrency": 8, "maxQueued": 100, "concurrency": {"min": 1}})
                await until(lambda: engine.running == 8, "eight requests at the engine after the reload")
                assert gate.admission.queue_length == 4
                assert (
                    await gate_metric(session, url, "kvant_gate_configured_limit", field="maxConcurrency")
                    == 8
                )
                assert await gate_metric(session, url, "kvant_gate_limits_reloads_total", result="ok") == 1

                limits.write({"maxConcurrency": 1, "maxQueued": 100, "concurrency": {"min": 1}})
                await until(lambda: gate.admission.concurrency == 1, "the lower limit to apply")
                engine.release.set()
                results = await asyncio.gather(*calls)

            assert [status for status, _ in results] == [200] * len(paths)
            assert all("second" in text and "[DONE]" in text for status, text in results[1::2])
            assert engine.completed == len(paths)
            assert engine.aborted == 0

    run(scenario())


def test_a_bad_file_keeps_the_last_good_limits_and_says_so(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 5})
        async with held_engine_behind_gate(limits) as (_engine, gate, url, session):
            limits.write({"maxConcurrency": "many"})

            async def marked_invalid() -> bool:
                return await gate_metric(session, url, "kvant_gate_limits_valid") == 0

            await until(marked_invalid, "the gate to report the limits file invalid")
            assert gate.admission.limits.maxConcurrency == 5
            assert await gate_metric(session, url, "kvant_gate_limits_reloads_total", result="error") == 1

            limits.write({"maxConcurrency": 7})
            await until(lambda: gate.admission.limits.maxConcurrency == 7, "the next good file to apply")
            assert await gate_metric(session, url, "kvant_gate_limits_valid") == 1

            limits.path.unlink()  # the ConfigMap is gone: keep serving with what we have

            async def marked_invalid_again() -> bool:
                return await gate_metric(session, url, "kvant_gate_limits_valid") == 0

            await until(marked_invalid_again, "the gate to report the missing file")
            assert gate.admission.limits.maxConcurrency == 7
            assert await gate_metric(session, url, "kvant_gate_limits_reloads_total", result="error") == 2

    run(scenario())
