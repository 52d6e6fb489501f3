"""Engine metrics that fail or go missing count as saturated, but never push below concurrency.min."""

from __future__ import annotations

import aiohttp
import pytest

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.concurrency import ConcurrencyController, EngineSample
from kvant_runtime.gate.engine_metrics import EngineMetricsError, parse_engine_metrics
from tests.unit.gate_harness import (
    KubeletLimitsDir,
    gate_in_front_of,
    gate_metric,
    held_engine,
    held_engine_behind_gate,
    run,
    until,
)


def test_a_missing_sample_cuts_even_while_in_flight_drains_and_stops_at_min():
    controller = ConcurrencyController(parse_limits({"maxConcurrency": 40, "concurrency": {"min": 6}}))
    values = []
    for tick in range(10):
        controller.step(None, now=float(tick), in_flight=40)
        values.append(controller.value)
    assert values == [30, 22, 16, 12, 9, 6, 6, 6, 6, 6]
    healthy = EngineSample(token_usage=0.1, retracted_total=0, max_total_num_tokens=None)
    assert controller.step(healthy, now=10.0, in_flight=0) is not None
    assert controller.value == 7


def test_metrics_without_token_usage_are_not_a_sample():
    with pytest.raises(EngineMetricsError, match=r"sglang:token_usage.*--enable-metrics"):
        parse_engine_metrics("# TYPE other gauge\nother 1\n")


def test_failing_engine_metrics_drive_the_gate_to_min_and_recovery_raises_it_again(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 32, "concurrency": {"min": 3, "max": 64}})
        async with held_engine_behind_gate(limits) as (engine, gate, url, session):
            engine.metrics_status = 500
            await until(lambda: gate.admission.concurrency == 3, "the effective concurrency to reach min")
            assert await gate_metric(session, url, "kvant_gate_engine_metrics_stale") == 1
            changes = await gate_metric(
                session,
                url,
                "kvant_gate_concurrency_changes_total",
                direction="down",
                signal="stale_metrics",
            )
            assert changes is not None and changes >= 1

            seen_below_min: list[int] = []

            def recovered() -> bool:
                if gate.admission.concurrency < 3:
                    seen_below_min.append(gate.admission.concurrency)
                return gate.admission.concurrency == 32

            engine.metrics_status = 200
            await until(recovered, "the effective concurrency to climb back to maxConcurrency")
            assert seen_below_min == []
            assert await gate_metric(session, url, "kvant_gate_engine_metrics_stale") == 0

    run(scenario())


def test_retractions_at_the_engine_lower_the_gate_limit_and_a_full_cache_alone_does_not(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 32, "targetTokenUsage": 0.8, "concurrency": {"min": 2}})
        async with held_engine() as engine, gate_in_front_of(engine.url, limits) as (gate, url):
            engine.token_usage = 0.95
            async with aiohttp.ClientSession() as session:
                await until(
                    lambda: _gauge(session, url, "kvant_gate_engine_token_usage", 0.95),
                    "the gate to read 0.95",
                )
                assert gate.admission.concurrency == 32
                engine.retracted_total = 3
                await until(lambda: gate.admission.concurrency < 32, "the limit to fall on retractions")
                assert await gate_metric(
                    session,
                    url,
                    "kvant_gate_concurrency_changes_total",
                    direction="down",
                    signal="retractions",
                )

    run(scenario())


async def _gauge(session: aiohttp.ClientSession, url: str, name: str, value: float) -> bool:
    return await gate_metric(session, url, name) == value
