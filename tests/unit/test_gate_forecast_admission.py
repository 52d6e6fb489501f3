"""Admission by forecast: the gate learns how long the model's answers really are and reserves that,
capped by each request's limit, with a margin for the in-flight total; live evidence that it
proved short widens it; worstCase keeps the hard bound."""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
from pathlib import Path
from statistics import NormalDist

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.answer_counts import answered_output_tokens
from kvant_runtime.gate.forecast import MAX_QUANTILE, MIN_SAMPLES, WINDOW, OutputForecast
from tests.unit.gate_harness import KubeletLimitsDir, held_engine_behind_gate, run, until

BODY = {"text": "x" * 40, "sampling_params": {"max_new_tokens": 400}}  # 10 prompt tokens, limit 400


def test_each_sequence_reserves_the_mean_and_the_budget_keeps_a_margin_for_the_total() -> None:
    forecast = OutputForecast()
    for n in range(1, MIN_SAMPLES):
        forecast.observe(n)
    assert forecast.tokens() is None and forecast.margin(10, 0.95) == 0  # too little known: worst case
    assert forecast.reserve(10, 2, 400) == 10 + 2 * 400
    for n in range(MIN_SAMPLES, 101):
        forecast.observe(n)
    lengths = list(range(1, 101))
    assert forecast.tokens() == math.ceil(statistics.fmean(lengths)) == 51
    assert forecast.reserve(10, 2, 400) == 10 + 2 * 51
    assert forecast.reserve(10, 2, 30) == 10 + 2 * 30  # never above the request's own limit
    # The total of n lengths: mean n x 50.5, spread sqrt(n) x stdev; z(0.95) = 1.645.
    spread = statistics.pstdev(lengths)
    assert forecast.margin(16, 0.95) == math.ceil(1.6448536 * spread * 4)
    assert forecast.margin(64, 0.95) == math.ceil(1.6448536 * spread * 8)  # grows as sqrt(n), not n
    assert forecast.margin(16, 0.5) == 0 and forecast.margin(0, 0.95) == 0
    assert forecast.margin(16, 1.0) == math.ceil(NormalDist().inv_cdf(MAX_QUANTILE) * spread * 4)
    for _ in range(WINDOW):
        forecast.observe(7)  # the model's answers got short: old lengths leave the window
    assert forecast.tokens() == 7 and forecast.margin(16, 0.95) == 0


def test_the_margin_covers_the_in_flight_total_at_the_quantile() -> None:
    # What the margin promises, checked by drawing: lognormal answers (a common fit to chat), 32 in
    # flight; their total exceeds 32 x mean + margin in about 5 % of draws at quantile 0.95.
    rng = random.Random(7)
    forecast = OutputForecast()
    window = [round(300 * math.exp(0.8 * rng.gauss(0, 1))) for _ in range(WINDOW)]
    for length in window:
        forecast.observe(length)
    reserved = 32 * forecast.tokens() + forecast.margin(32, 0.95)  # type: ignore[operator]
    totals = [sum(round(300 * math.exp(0.8 * rng.gauss(0, 1))) for _ in range(32)) for _ in range(4000)]
    exceeded = sum(total > reserved for total in totals) / len(totals)
    assert 0.01 <= exceeded <= 0.10
    per_sequence_q95 = sorted(window)[math.ceil(0.95 * WINDOW) - 1]
    assert reserved < 0.5 * 32 * per_sequence_q95  # half of what 32 per-sequence q95s would reserve


def test_pressure_widens_the_forecast_and_health_narrows_it_back() -> None:
    forecast = OutputForecast()
    for _ in range(MIN_SAMPLES):
        forecast.observe(100)
    forecast.pressure()
    forecast.pressure()
    assert forecast.tokens() == 225
    for _ in range(200):
        forecast.healthy()
    assert forecast.tokens() == 100 and forecast.widen == 1.0


def test_live_signals_widen_only_when_the_forecast_proved_short() -> None:
    forecast = OutputForecast()
    for _ in range(MIN_SAMPLES):
        forecast.observe(100)

    def tick(held: float | None, reserved: int = 5000, retracted: bool = False, stale: bool = False) -> None:
        forecast.correct(stale=stale, retracted=retracted, held=held, reserved=reserved, slack=500)

    tick(held=5400)  # a full cache within what was reserved: no evidence
    assert forecast.widen == 1.0
    tick(held=5600)  # the engine holds more than reserved plus slack: too short
    assert forecast.widen == 1.5
    tick(held=None, retracted=True)
    assert forecast.widen == 2.25
    tick(held=None, stale=True)
    assert forecast.widen == 3.375
    tick(held=9000, reserved=0)  # nothing admitted: nothing to judge
    assert forecast.widen < 3.375
    for _ in range(200):
        tick(held=1000)
    assert forecast.widen == 1.0 and forecast.tokens() == 100


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
            assert gate.forecast.tokens() == 20

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


def test_the_budget_check_counts_the_margin_for_every_sequence_in_flight() -> None:
    async def scenario() -> None:
        limits = parse_limits(
            {"mode": "enforce", "admission": "forecast", "maxConcurrency": 64, "concurrency": {"min": 1}}
        )
        admission = Admission(limits)
        admission.set_token_capacity(1000)  # budget 950
        admission.set_margin(lambda sequences: 100 * sequences)
        first = await admission.acquire(300)
        second = await admission.acquire(200, sequences=2)  # 300 + 200 + margin(3) 300 = 800
        assert admission.in_flight_sequences == 3
        third = asyncio.create_task(admission.acquire(100))  # 600 + margin(4) 400 = 1000 > 950
        await asyncio.sleep(0)
        assert admission.queue_length == 1 and not third.done()
        admission.release(first)  # 300 + margin(3) 300 = 600
        ticket = await third
        assert admission.in_flight_sequences == 3 and ticket.sequences == 1
        admission.release(second)
        admission.release(ticket)
        assert admission.in_flight_sequences == admission.in_flight_tokens == 0

    run(scenario())
