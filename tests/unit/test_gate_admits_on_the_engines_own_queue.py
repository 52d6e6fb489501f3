"""`engine` admission (the default): the gate keeps the engine's own waiting queue short but never
empty, reading the engine's `/v1/loads`, and reserves no KV of its own; missing or stale loads count
as saturated (one request at a time)."""

from __future__ import annotations

import asyncio

import pytest

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.admit.claims import Ticket
from kvant_runtime.gate.admit.engine_queue import MIN_ENGINE_QUEUE, depth
from kvant_runtime.gate.admit.kv_peak import future_peak, in_flight_growth
from kvant_runtime.gate.admit.room import ENGINE_LOAD_STALE_SECONDS
from kvant_runtime.gate.engine_load import EngineLoad, EngineLoadError, parse_loads
from kvant_runtime.gate.refusals import Rejected
from tests.unit.gate_harness import KubeletLimitsDir, held_engine_behind_gate, run, until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _load(clock: Clock, running: int, waiting: int = 0, used: int = 0, capacity: int = 4096) -> EngineLoad:
    return EngineLoad(
        running=running, waiting=waiting, used_tokens=used, capacity=capacity, read_at=clock.now
    )


def test_loads_add_up_across_data_parallel_ranks_and_name_what_is_missing():
    rank = {
        "num_running_reqs": 3,
        "num_waiting_reqs": 1,
        "num_used_tokens": 900,
        "max_total_num_tokens": 2048,
    }
    load = parse_loads({"loads": [rank, {**rank, "num_running_reqs": 5}]}, read_at=7.0)
    assert (load.running, load.waiting, load.used_tokens, load.capacity) == (8, 2, 1800, 4096)
    assert load.free_tokens == 4096 - 1800 and load.read_at == 7.0
    with pytest.raises(EngineLoadError, match="num_waiting_reqs"):
        parse_loads({"loads": [{k: v for k, v in rank.items() if k != "num_waiting_reqs"}]}, 0.0)
    with pytest.raises(EngineLoadError, match="no 'loads' list"):
        parse_loads({"version": "0.5.23"}, 0.0)
    with pytest.raises(EngineLoadError, match="max_total_num_tokens 0"):
        parse_loads({"loads": [{**rank, "max_total_num_tokens": 0}]}, 0.0)


def test_requests_go_while_the_engine_has_fewer_than_depth_waiting_then_wait_for_it_to_start_them():
    async def scenario() -> None:
        clock = Clock()
        admission = Admission(parse_limits({"maxConcurrency": 64}), clock)
        admission.set_engine_load(_load(clock, running=4))
        assert depth(_load(clock, running=4)) == MIN_ENGINE_QUEUE == 2
        # The gate already has the 4 running in flight: 2 more may wait in the engine, no more.
        tickets = [await admission.acquire(100) for _ in range(6)]
        waiting = asyncio.create_task(admission.acquire(100))
        await until(lambda: admission.queue_length == 1, "the 7th to wait in the gate")
        # No KV reserved by the gate: 6 x 100 tokens of a 4,096-token cache is not what holds it back.
        assert admission.in_flight == 6
        admission.set_engine_load(_load(clock, running=6))  # the engine started the two
        tickets.append(await waiting)
        assert admission.in_flight == 7
        for ticket in tickets:
            admission.release(ticket)

    run(scenario())


def test_a_large_running_batch_keeps_a_quarter_of_itself_waiting():
    clock = Clock()
    assert depth(_load(clock, running=40)) == 10
    assert depth(_load(clock, running=0)) == MIN_ENGINE_QUEUE


def test_what_the_engine_reports_waiting_counts_even_when_the_gate_sent_none_of_it():
    async def scenario() -> None:
        clock = Clock()
        admission = Admission(parse_limits({}), clock)
        admission.set_engine_load(_load(clock, running=0, waiting=3))
        waiting = asyncio.create_task(admission.acquire(10))
        await until(lambda: admission.queue_length == 1, "the request to wait for the engine's queue")
        admission.set_engine_load(_load(clock, running=3, waiting=0))
        admission.release(await waiting)

    run(scenario())


def test_missing_or_stale_loads_count_as_saturated_one_request_at_a_time():
    async def scenario() -> None:
        clock = Clock()
        admission = Admission(parse_limits({}), clock)
        first = await admission.acquire(10)  # nothing known yet: one at a time, never none
        second = asyncio.create_task(admission.acquire(10))
        await until(lambda: admission.queue_length == 1, "the second to wait while nothing is known")
        admission.set_engine_load(_load(clock, running=1))
        third = await second
        clock.now += ENGINE_LOAD_STALE_SECONDS + 0.1  # the snapshot goes stale
        fourth = asyncio.create_task(admission.acquire(10))
        await until(lambda: admission.queue_length == 1, "the fourth to wait on a stale snapshot")
        admission.release(first)
        admission.release(third)
        admission.release(await fourth)  # nothing in flight: it goes
        assert admission.in_flight == 0

    run(scenario())


def test_the_effective_concurrency_still_caps_engine_admission():
    async def scenario() -> None:
        clock = Clock()
        admission = Admission(parse_limits({"maxConcurrency": 2}), clock)
        admission.set_engine_load(_load(clock, running=0))
        tickets = [await admission.acquire(10) for _ in range(2)]
        admission.set_engine_load(_load(clock, running=2))
        third = asyncio.create_task(admission.acquire(10))
        await until(lambda: admission.queue_length == 1, "the third to wait for the concurrency")
        admission.release(tickets.pop())
        tickets.append(await third)
        for ticket in tickets:
            admission.release(ticket)

    run(scenario())


def test_observe_mode_reports_the_engine_queue_it_would_have_waited_for():
    async def scenario() -> None:
        clock = Clock()
        admission = Admission(parse_limits({"mode": "observe"}), clock)
        admission.set_engine_load(_load(clock, running=0, waiting=5))
        ticket = await admission.acquire(10)
        assert ticket.over_limits == ("engine_queue",)
        admission.release(ticket)

    run(scenario())


def test_the_gate_reads_the_engines_loads_and_holds_what_the_engine_has_no_room_to_start(tmp_path):
    """Through HTTP: the held engine reports what it holds as running and `waiting` more; the gate's
    load loop reads it, and requests wait in the gate while the engine's queue is full."""

    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 16})
        async with held_engine_behind_gate(limits) as (engine, gate, url, session):
            engine.waiting = 5
            await until(
                lambda: gate.admission.room.engine is not None and gate.admission.room.engine.waiting == 5,
                "the gate to read the engine's queue",
            )
            sent = asyncio.create_task(session.post(f"{url}/generate", json={"text": "hi"}))
            await until(lambda: gate.admission.queue_length == 1, "the request to wait in the gate")
            assert engine.running == 0
            engine.waiting = 0
            await until(lambda: engine.running == 1, "the engine to get it once its queue emptied")
            engine.release.set()
            async with await sent as response:
                assert response.status == 200

    run(scenario())


def test_the_future_peak_counts_each_request_until_it_ends_not_every_limit_at_once():
    # Three requests that each end at their limit: 100 tokens now with 50 to go, 60 with 100 to go,
    # 10 with 300 to go. Their whole limits sum to 620; the cache never holds more than 410 at once.
    growths = [(100, 50, 1), (60, 100, 1), (10, 300, 1)]
    assert future_peak(growths) == max(100 + 60 + 10 + 3 * 49, 60 + 10 + 2 * 99, 10 + 299) == 317
    assert future_peak([]) == 0
    # Four samples of one prompt grow by four tokens a step: 100 steps of 400 output tokens.
    assert future_peak([(100, 100, 4)]) == 100 + 4 * 99


def test_what_the_engine_reports_running_shares_its_generated_tokens_by_age():
    clock = Clock()
    tickets = [
        Ticket(tokens=300, waited_seconds=0, output_tokens=200, granted_at=90.0),  # 100 prompt, 10 s old
        Ticket(tokens=300, waited_seconds=0, output_tokens=200, granted_at=95.0),  # 100 prompt, 5 s old
        Ticket(tokens=50, waited_seconds=0, output_tokens=40, granted_at=99.0),  # not running yet
    ]
    load = _load(clock, running=2, used=200 + 150)  # the two running hold 150 generated tokens
    assert in_flight_growth(tickets, load, clock.now) == [(200, 100, 1), (150, 150, 1), (10, 40, 1)]
    # A request of 4 samples counts 4 running in the engine's snapshot.
    samples = Ticket(tokens=500, waited_seconds=0, sequences=4, output_tokens=400, granted_at=90.0)
    later = Ticket(tokens=300, waited_seconds=0, output_tokens=200, granted_at=95.0)
    growth = in_flight_growth([samples, later], _load(clock, running=4, used=100 + 40), clock.now)
    assert growth == [(140, 90, 4), (100, 200, 1)]


def test_engine_admission_lets_through_what_fits_as_requests_end_more_than_worst_case_would():
    async def scenario() -> None:
        clock = Clock()
        admission = Admission(parse_limits({"maxConcurrency": 64}), clock)
        # A 1,000-token cache; each request is 100 prompt + 300 output tokens (400 at its end).
        admission.set_engine_load(_load(clock, running=0, capacity=1000))
        first = await admission.acquire(400, output_tokens=300)
        clock.now += 10.0
        # The engine runs it and it has generated 250: 350 held, 50 to go.
        admission.set_engine_load(_load(clock, running=1, used=350, capacity=1000))
        second = await admission.acquire(400, output_tokens=300)  # peak 350+100+2*49 = 548: fits
        clock.now += 1.0
        admission.set_engine_load(_load(clock, running=2, used=400 + 110, capacity=1000))
        # Worst case would hold 3 x 400 = 1,200 > 1,000; the two running end before the third's peak.
        third = await admission.acquire(400, output_tokens=300)
        assert admission.in_flight == 3
        fourth = asyncio.create_task(admission.acquire(400, output_tokens=300))
        await until(lambda: admission.queue_length == 1, "a fourth that could overflow the cache to wait")
        for ticket in (first, second, third):
            admission.release(ticket)
        admission.set_engine_load(_load(clock, running=0, capacity=1000))
        admission.release(await fourth)

    run(scenario())


def test_a_loads_timestamp_is_when_the_engine_published_it_on_the_gates_clock():
    rank = {"num_running_reqs": 1, "num_waiting_reqs": 0, "num_used_tokens": 9, "max_total_num_tokens": 99}
    load = parse_loads({"loads": [{**rank, "timestamp": 1000.0}]}, read_at=50.0, wall_now=1000.4)
    assert load.published_at == pytest.approx(49.6) and load.as_of == load.published_at
    assert parse_loads({"loads": [rank]}, read_at=50.0, wall_now=1000.4).as_of == 50.0


async def _second_behind_a_stale_snapshot(clock: Clock) -> tuple[Admission, Ticket]:
    """Two 200-token requests let through, then the first given back after the engine's latest
    snapshot (which still counts its 190 tokens in `used`); returns the admission and the second."""
    admission = Admission(parse_limits({}), clock)
    admission.set_engine_load(_load(clock, running=0, capacity=1000))
    first = await admission.acquire(200, output_tokens=100)
    second = await admission.acquire(200, output_tokens=100)
    clock.now += 5.0
    stale = _load(clock, running=2, used=380, capacity=1000)
    clock.now += 1.0
    admission.release(first)
    admission.set_engine_load(stale)
    return admission, second


def test_a_snapshot_older_than_the_last_release_lets_nothing_new_through_until_a_newer_one():
    """It still counts the released request's tokens, which would read as another's progress."""

    async def scenario() -> None:
        clock = Clock()
        admission, second = await _second_behind_a_stale_snapshot(clock)
        # 200 + 780 at their whole limits would pass the 950 the check allows: the snapshot matters.
        third = asyncio.create_task(admission.acquire(780, output_tokens=50))
        await until(lambda: admission.queue_length == 1, "the third to wait for a newer snapshot")
        # Fresh: the second has 10 tokens to go, so the peak is 940 (190 + 10 + 730 + 10).
        admission.set_engine_load(_load(clock, running=1, used=190, capacity=1000))
        admission.release(await third)
        admission.release(second)

    run(scenario())


def test_a_stale_snapshot_does_not_hold_what_fits_at_every_requests_whole_limit():
    """No reading of anyone's progress can overflow the cache then, and waiting for the next snapshot
    cost every request of a light load half a snapshot interval (bench/README)."""

    async def scenario() -> None:
        admission, second = await _second_behind_a_stale_snapshot(Clock())
        third = await asyncio.wait_for(admission.acquire(200, output_tokens=100), 1.0)  # 400 <= 950
        admission.release(third)
        admission.release(second)

    run(scenario())


def test_a_gate_without_a_waiting_room_skips_pacing_and_refuses_only_what_does_not_fit():
    """`maxQueued: 0`: holding a request for the engine's queue or its next snapshot would refuse it
    (a CI run's router test got 429s from idle replicas so); the KV and concurrency checks stay."""

    async def scenario() -> None:
        clock = Clock()
        admission = Admission(parse_limits({"maxConcurrency": 8, "maxQueued": 0}), clock)
        admission.set_engine_load(_load(clock, running=0, capacity=1000))
        # Three 300-token growths peak at 900 of the 950 the check allows; engine_queue alone would
        # have held the third (two on their way to an engine that reports none running).
        tickets = [await admission.acquire(300, output_tokens=200) for _ in range(3)]
        with pytest.raises(Rejected):  # a fourth would peak at 1,200
            await admission.acquire(300, output_tokens=200)
        clock.now += 0.5
        admission.release(tickets.pop())  # after the snapshot: engine_snapshot would wait for the next
        tickets.append(await admission.acquire(300, output_tokens=200))
        for ticket in tickets:
            admission.release(ticket)

    run(scenario())
