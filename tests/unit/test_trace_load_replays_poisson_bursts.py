"""The open-loop trace generator behind bench/protection/trace.py: arrivals at the mean rate, three
times as dense in bursts, prompts from the mixture, the same trace from the same seed; a replay
against the simulator streams, times the first token and reads each answer's length."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

import pytest

from kvant_dev.trace_load import CUT, Trace, arrivals, replay
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.output_lengths import parse_output_lengths
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import run, serving

BURSTY = Trace(rate=50.0, seconds=200.0, burst_factor=3.0, burst_every=10.0, burst_seconds=2.0)


def test_arrivals_keep_the_mean_rate_and_burst_three_times_as_dense() -> None:
    found = arrivals(BURSTY)
    assert len(found) == pytest.approx(50 * 200, rel=0.03)
    in_burst = sum(1 for a in found if a.at % 10 < 2)
    # Bursts are a fifth of the time at three times the base rate: 3 / (3 + 4) of the arrivals.
    assert in_burst / len(found) == pytest.approx(3 / 7, abs=0.02)
    assert [a.at for a in found] == sorted(a.at for a in found)
    assert arrivals(BURSTY) == found  # one seed, one trace
    assert arrivals(replace(BURSTY, seed=1)) != found


def test_prompts_come_from_the_mixture_within_bounds() -> None:
    mixed = replace(BURSTY, long_fraction=0.1, long_median=8000, max_prompt=16_000)
    prompts = [a.prompt_tokens for a in arrivals(mixed)]
    long = [p for p in prompts if p > 4000]
    assert len(long) / len(prompts) == pytest.approx(0.1, abs=0.015)
    assert statistics.median(long) == pytest.approx(8000, rel=0.05)
    assert statistics.median(p for p in prompts if p <= 4000) == pytest.approx(1000, rel=0.05)
    assert min(prompts) >= 16 and max(prompts) <= 16_000


@pytest.mark.parametrize(
    "bad", [replace(BURSTY, rate=0.0), replace(BURSTY, seconds=-1.0), replace(BURSTY, burst_factor=0.5)]
)
def test_a_trace_that_cannot_run_is_refused(bad: Trace) -> None:
    with pytest.raises(ValueError, match="a trace needs"):
        arrivals(bad)


def _simulator(decode_base_s: float, **config: Any) -> Engine:
    cost = CostModel(decode_base_s=decode_base_s, decode_per_request_s=0.0, prefill_per_token_s=0.0)
    return Engine(
        EngineConfig(kv_tokens=200_000, max_running_requests=64, context_length=8192, cost=cost, **config)
    )


def test_a_replay_streams_times_the_first_token_and_reads_each_length() -> None:
    engine = _simulator(0.001, output_lengths=parse_output_lengths("lognormal:30,0.5"))
    sim = SimServer(engine, ServerInfo("tiny", stream_interval=8))
    trace = Trace(rate=20.0, seconds=1.0, prompt_median=50, max_tokens=400, max_prompt=200)

    async def scenario() -> None:
        async with serving(sim.app()) as url:
            outcomes = await replay(url, trace, drain_seconds=20.0)
        assert len(outcomes) == len(arrivals(trace)) > 5
        assert all(o.status == 200 for o in outcomes)
        for o in outcomes:
            assert o.ttft is not None and o.latency is not None and 0 < o.ttft <= o.latency
            assert 1 <= o.output_tokens < 400  # stopped at its natural length, counted from the last event
        assert len({o.output_tokens for o in outcomes}) > 1

    run(scenario())


def test_requests_unanswered_at_the_end_of_the_drain_are_cut() -> None:
    slow = _simulator(0.05)
    trace = Trace(rate=10.0, seconds=0.5, prompt_median=50, max_tokens=400, max_prompt=200)

    async def scenario() -> None:
        async with serving(SimServer(slow, ServerInfo("tiny")).app()) as url:
            outcomes = await replay(url, trace, drain_seconds=0.5)  # 400 tokens take 20 s
        assert outcomes and all(o.status == CUT and o.latency is None for o in outcomes)

    run(scenario())


def test_each_request_carries_the_headers_made_for_it() -> None:
    sim = SimServer(_simulator(0.001), ServerInfo("tiny"))
    app = sim.app()
    seen: dict[str, str] = {}

    async def record(request: Any, _response: Any) -> None:
        if request.path == "/generate":
            seen[request.headers["X-Request-Number"]] = request.headers["X-Arrival-Ms"]

    app.on_response_prepare.append(record)
    trace = Trace(rate=20.0, seconds=1.0, prompt_median=50, max_tokens=8, max_prompt=200)
    expected = {str(n): str(round(a.at * 1000)) for n, a in enumerate(arrivals(trace))}

    def headers(number: int, arrival: Any) -> dict[str, str]:
        return {"X-Request-Number": str(number), "X-Arrival-Ms": str(round(arrival.at * 1000))}

    async def scenario() -> None:
        async with serving(app) as url:
            outcomes = await replay(url, trace, drain_seconds=20.0, headers=headers)
        assert all(o.status == 200 for o in outcomes)
        assert seen == expected

    run(scenario())
