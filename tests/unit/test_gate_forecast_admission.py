"""Admission by forecast: the gate learns how long the model's answers really are and reserves that,
capped by each request's limit; live pressure widens the forecast; worstCase keeps the hard bound."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from kvant_runtime.gate.forecast import MIN_SAMPLES, WINDOW, OutputForecast
from kvant_runtime.gate.proxy import answered_output_tokens
from tests.unit.gate_harness import KubeletLimitsDir, held_engine_behind_gate, run, until

BODY = {"text": "x" * 40, "sampling_params": {"max_new_tokens": 400}}  # 10 prompt tokens, limit 400


def test_the_forecast_is_a_high_quantile_of_recent_answers_once_enough_are_seen() -> None:
    forecast = OutputForecast()
    for n in range(1, MIN_SAMPLES):
        forecast.observe(n)
    assert forecast.tokens(0.95) is None  # too little known: worst case
    assert forecast.reserve(10, 2, 400, 0.95) == 10 + 2 * 400
    for n in range(MIN_SAMPLES, 101):
        forecast.observe(n)
    assert forecast.tokens(0.95) == 95 and forecast.tokens(0.5) == 50
    assert forecast.reserve(10, 2, 400, 0.95) == 10 + 2 * 95
    assert forecast.reserve(10, 2, 60, 0.95) == 10 + 2 * 60  # never above the request's own limit
    for _ in range(WINDOW):
        forecast.observe(7)  # the model's answers got short: old lengths leave the window
    assert forecast.tokens(0.95) == 7


def test_pressure_widens_the_forecast_and_health_narrows_it_back() -> None:
    forecast = OutputForecast()
    for _ in range(MIN_SAMPLES):
        forecast.observe(100)
    forecast.pressure()
    forecast.pressure()
    assert forecast.tokens(0.95) == 225
    for _ in range(200):
        forecast.healthy()
    assert forecast.tokens(0.95) == 100 and forecast.widen == 1.0


def test_output_lengths_are_read_from_every_answer_shape() -> None:
    assert answered_output_tokens(json.dumps({"meta_info": {"completion_tokens": 12}}).encode()) == [12]
    batch = [{"meta_info": {"completion_tokens": 3}}, {"meta_info": {"completion_tokens": 5}}]
    assert answered_output_tokens(json.dumps(batch).encode()) == [3, 5]
    chat = {"choices": [{}, {}], "usage": {"completion_tokens": 40}}
    assert answered_output_tokens(json.dumps(chat).encode()) == [20, 20]
    assert answered_output_tokens(b"not json") == []


def test_learned_answers_let_more_requests_in_and_worst_case_switches_back_under_load(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 64, "concurrency": {"min": 1}, "admission": "forecast"})
        async with held_engine_behind_gate(limits) as (engine, gate, url, session):
            await until(lambda: gate.admission.token_budget == 950, "the engine's capacity")

            async def call() -> int:
                async with session.post(url + "/generate", json=BODY) as resp:
                    await resp.read()
                    return resp.status

            # Worst case until the forecast has seen enough: 410 tokens each, two fit in 950.
            first = [asyncio.create_task(call()) for _ in range(4)]
            await until(lambda: engine.running == 2 and gate.admission.queue_length == 2, "two admitted")
            engine.release.set()
            assert [await t for t in first] == [200] * 4
            engine.completion_tokens = 20  # the model answers in 20 tokens
            assert await asyncio.gather(*(call() for _ in range(MIN_SAMPLES))) == [200] * MIN_SAMPLES
            assert gate.forecast.tokens(0.95) == 20

            engine.release.clear()
            held = [asyncio.create_task(call()) for _ in range(12)]
            # 10 + 20 = 30 tokens each now: all twelve run at once
            await until(lambda: engine.running == 12, "twelve admitted on the forecast")
            assert gate.admission.in_flight_tokens == 12 * 30

            limits.write({"maxConcurrency": 64, "concurrency": {"min": 1}, "admission": "worstCase"})
            await until(lambda: gate.admission.limits.admission == "worstCase", "the new limits")
            late = [asyncio.create_task(call()) for _ in range(2)]
            # 360 + 410 fits 950, a second 410 does not: worst case admits one and queues one
            await until(
                lambda: engine.running == 13 and gate.admission.queue_length == 1,
                "one worst-case request to wait",
            )
            engine.release.set()
            assert [await t for t in held + late] == [200] * 14

    run(scenario())
