"""Many tenants on one protected cache: admission by priority class, then fair share (VTC), then
deadline; sheddable work shed first; deadlines refused at once when the drain rate says so; per-tenant
token rates; live edits re-order the queue; per-tenant metrics stay bounded.

Everything here is driven by events (releases, a test clock), never by how long something takes."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvant_contracts.limits import parse_limits
from kvant_contracts.tenancy import OTHER_TENANTS, TOP_TENANTS, Priority
from kvant_runtime.gate.admission import Admission, Ticket
from kvant_runtime.gate.gate_metrics import GateMetrics
from kvant_runtime.gate.refusals import Rejected
from tests.unit.gate_harness import run


class Clock:
    """The admission's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _admission(clock: Clock | None = None, **limits: Any) -> Admission:
    # The gate's own reservations (worstCase): these tests are about the order, not the engine's state.
    document = {"admission": "worstCase", "maxConcurrency": 1, "queueTimeoutSeconds": 3600, **limits}
    return Admission(parse_limits(document), clock=clock or Clock())


async def settle() -> None:
    """Lets every task that can move do so (a granted waiter wakes on the next loop turn)."""
    for _ in range(10):
        await asyncio.sleep(0)


def _task(coroutine: Coroutine[Any, Any, Ticket]) -> asyncio.Task[Ticket]:
    return asyncio.get_running_loop().create_task(coroutine)


async def _cancel(*tasks: asyncio.Task[Ticket]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _grant_order(
    admission: Admission, holder: Ticket, named: dict[str, asyncio.Task[Ticket]]
) -> list[str]:
    """Releases `holder`, then each request as it is granted (concurrency 1): the names in grant order."""
    order: list[str] = []
    admission.release(holder)
    while len(order) < len(named):
        await settle()
        granted = [name for name, task in named.items() if task.done() and name not in order]
        assert len(granted) == 1, f"one request at a time, got {granted}"
        order.append(granted[0])
        admission.release(named[granted[0]].result())
    return order


def test_classes_go_in_rank_order_whatever_the_arrival_order() -> None:
    async def scenario() -> None:
        admission = _admission(tenancy={"tenants": [{"name": "gold", "priority": "critical"}]})
        holder = await admission.acquire(1)
        named: dict[str, asyncio.Task[Ticket]] = {}
        arrivals: tuple[tuple[str, str, Priority | None], ...] = (
            ("sheddable", "batch", "sheddable"),
            ("standard", "web", None),  # the default class
            ("critical-by-key", "web", "critical"),
            ("critical-by-limits", "gold", None),  # the tenant's class in the limits
        )
        for name, tenant, priority in arrivals:
            named[name] = _task(admission.acquire(1, tenant=tenant, priority=priority))
            await settle()
        assert admission.queue_length == 4
        assert await _grant_order(admission, holder, named) == [
            "critical-by-key",
            "critical-by-limits",
            "standard",
            "sheddable",
        ]

    run(scenario())


def test_one_tenant_in_one_class_is_fifo_and_an_earlier_deadline_goes_first() -> None:
    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock)
        await _queued_waits(admission, clock, [1.0])  # a measured drain rate: a deadline can be judged
        assert admission.drain_rate is not None
        holder = await admission.acquire(1)
        named = {}
        for name, deadline in (("first", None), ("second", None), ("hurried", 600.0), ("third", None)):
            named[name] = _task(admission.acquire(1, deadline_seconds=deadline))
            await settle()
        assert await _grant_order(admission, holder, named) == ["hurried", "first", "second", "third"]

    run(scenario())


async def _simulate(
    admission: Admission, clock: Clock, arrivals: dict[str, int], ticks: int, tokens: int = 100
) -> collections.Counter[str]:
    """Each tick, everything in flight finishes, then the tenants send their arrivals, interleaved
    (a tenant sending twice as many sends two for the other's one); returns the tokens admitted per
    tenant. Requests refused or evicted are dropped, as a client given 429 goes away."""
    running: list[Ticket] = []
    pending: set[asyncio.Task[Ticket]] = set()
    admitted: collections.Counter[str] = collections.Counter()
    spread = sorted(
        ((number + 0.5) / count, tenant) for tenant, count in arrivals.items() for number in range(count)
    )
    for _ in range(ticks):
        clock.now += 1.0
        for ticket in running:
            admission.release(ticket)
        running = []
        for _, tenant in spread:
            pending.add(_task(admission.acquire(tokens, tenant=tenant)))
            await asyncio.sleep(0)  # each arrives, and is queued or refused, before the next
        await settle()
        for task in [task for task in pending if task.done()]:
            pending.discard(task)
            if task.exception() is None:
                ticket = task.result()
                running.append(ticket)
                admitted[ticket.tenant] += ticket.tokens
    await _cancel(*pending)
    for ticket in running:
        admission.release(ticket)
    return admitted


@pytest.mark.parametrize(("steady", "fair_per_tick"), [(3, 3), (8, 5)])
def test_a_flooding_tenant_leaves_a_steady_one_its_fair_share(steady: int, fair_per_tick: int) -> None:
    """10 slots a tick. A floods (15 a tick); B asks `steady` a tick. Max-min fairness: B gets all it
    asks while that is under half, else half."""

    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock, maxConcurrency=10, maxQueued=100_000)
        ticks = 60
        admitted = await _simulate(admission, clock, {"A": 15, "B": steady}, ticks)
        fair = fair_per_tick * 100 * ticks
        assert abs(admitted["B"] - fair) <= 0.2 * fair, admitted
        assert admitted["A"] + admitted["B"] == 10 * 100 * ticks  # the replica was full throughout

    run(scenario())


def test_equal_tenants_get_equal_tokens_though_one_asks_twice_as_fast() -> None:
    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock, maxConcurrency=10, maxQueued=100_000)
        admitted = await _simulate(admission, clock, {"A": 8, "B": 16}, ticks=60)
        assert abs(admitted["A"] - admitted["B"]) <= 0.2 * max(admitted["A"], admitted["B"]), admitted

    run(scenario())


def test_a_full_queue_keeps_the_fair_share_when_one_tenant_asks_twice_as_fast() -> None:
    """A queue of 10 that fills every tick: who is refused at the door decides the split, and the
    tenant sending twice as many would hold twice the slots if the arrival were simply refused."""

    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock, maxConcurrency=10, maxQueued=10)
        admitted = await _simulate(admission, clock, {"A": 8, "B": 16}, ticks=60)
        assert admitted["A"] >= 0.8 * admitted["B"], admitted
        assert admitted["A"] + admitted["B"] >= 0.95 * 10 * 100 * 60  # the replica stayed full

    run(scenario())


def test_a_full_queue_evicts_the_newest_request_of_the_tenant_furthest_over_its_share() -> None:
    async def scenario() -> None:
        admission = _admission(maxConcurrency=2, maxQueued=3, retryAfterSeconds=7)
        holders = [
            await admission.acquire(100, tenant="modest"),
            await admission.acquire(1000, tenant="greedy"),
        ]
        greedy = [_task(admission.acquire(1, tenant="greedy")) for _ in range(3)]
        await settle()
        assert admission.queue_length == 3
        assert admission.fair_share_counter("greedy") > admission.fair_share_counter("modest")

        modest = _task(admission.acquire(1, tenant="modest"))
        await settle()
        assert not modest.done() and admission.queue_length == 3
        assert greedy[-1].done() and not any(task.done() for task in greedy[:-1])
        refused = greedy[-1].exception()
        assert isinstance(refused, Rejected)
        assert (refused.reason, refused.status, refused.retry_after) == ("evicted", 429, 7)
        assert "'greedy' is the furthest over its fair share" in str(refused)

        # The tenant further over its share is refused itself, not given a place.
        with pytest.raises(Rejected, match="further over its fair share") as full:
            await admission.acquire(1, tenant="greedy")
        assert full.value.reason == "queue_full"
        await _cancel(modest, *greedy[:-1])
        for ticket in holders:
            admission.release(ticket)

    run(scenario())


def test_tenants_level_in_their_share_refuse_the_arrival_and_evict_nobody() -> None:
    async def scenario() -> None:
        admission = _admission(maxQueued=2)
        holder = await admission.acquire(1, tenant="a")
        queued = [_task(admission.acquire(1, tenant=tenant)) for tenant in ("a", "b")]
        await settle()
        with pytest.raises(Rejected) as full:  # b's counter (lifted to a's) is a's: neither is further over
            await admission.acquire(1, tenant="b")
        assert full.value.reason == "queue_full"
        assert not any(task.done() for task in queued)
        await _cancel(*queued)
        admission.release(holder)

    run(scenario())


def test_a_full_queue_never_evicts_a_higher_class_however_far_over_its_share() -> None:
    async def scenario() -> None:
        admission = _admission(maxConcurrency=2, maxQueued=2, tenancy={"sheddableQueueShare": 1.0})
        big = await admission.acquire(10_000, tenant="hog")  # far over anyone's share
        holder = await admission.acquire(1, tenant="hog")
        critical = [_task(admission.acquire(1, tenant="hog", priority="critical")) for _ in range(2)]
        await settle()
        with pytest.raises(Rejected) as standard:
            await admission.acquire(1, tenant="fresh")
        assert standard.value.reason == "queue_full"
        with pytest.raises(Rejected) as sheddable:
            await admission.acquire(1, tenant="fresh", priority="sheddable")
        assert sheddable.value.reason == "queue_full"
        assert not any(task.done() for task in critical)
        await _cancel(*critical)
        admission.release(big)
        admission.release(holder)

    run(scenario())


def test_a_full_queue_evicts_the_lowest_class_first_then_its_tenant_furthest_over() -> None:
    async def scenario() -> None:
        admission = _admission(maxConcurrency=2, maxQueued=3, tenancy={"sheddableQueueShare": 1.0})
        # light first: heavy, lifted to light's counter, ends 1,000 further over its share.
        holders = [await admission.acquire(1, tenant="light"), await admission.acquire(1000, tenant="heavy")]
        standard = _task(admission.acquire(1, tenant="light"))
        heavy = _task(admission.acquire(1, tenant="heavy", priority="sheddable"))
        light = _task(admission.acquire(1, tenant="light", priority="sheddable"))
        await settle()
        # A critical arrival: sheddable goes before standard, and of sheddable the tenant furthest over
        # its share, though its request is older than light's.
        critical = _task(admission.acquire(1, tenant="light", priority="critical"))
        await settle()
        assert heavy.done() and heavy.exception().reason == "evicted"  # type: ignore[union-attr]
        assert "sheddable requests are shed first" in str(heavy.exception())
        assert not any(task.done() for task in (standard, light, critical))
        await _cancel(standard, light, critical)
        for ticket in holders:
            admission.release(ticket)

    run(scenario())


def test_sheddable_work_at_its_queue_share_evicts_the_sheddable_tenant_furthest_over() -> None:
    async def scenario() -> None:
        admission = _admission(maxConcurrency=2, maxQueued=4, tenancy={"sheddableQueueShare": 0.5})
        holders = [
            await admission.acquire(1, tenant="trickle"),
            await admission.acquire(1000, tenant="flood"),
        ]
        flood = [_task(admission.acquire(1, tenant="flood", priority="sheddable")) for _ in range(2)]
        await settle()
        trickle = _task(admission.acquire(1, tenant="trickle", priority="sheddable"))
        await settle()
        assert flood[1].done() and flood[1].exception().reason == "evicted"  # type: ignore[union-attr]
        assert not flood[0].done() and not trickle.done()
        with pytest.raises(Rejected, match="sheddableQueueShare"):  # flood is further over: refused
            await admission.acquire(1, tenant="flood", priority="sheddable")
        await _cancel(flood[0], trickle)
        for ticket in holders:
            admission.release(ticket)

    run(scenario())


def test_weights_share_in_proportion() -> None:
    async def scenario() -> None:
        clock = Clock()
        tenancy = {"tenants": [{"name": "A", "weight": 2}]}
        admission = _admission(clock, maxConcurrency=9, maxQueued=100_000, tenancy=tenancy)
        admitted = await _simulate(admission, clock, {"A": 12, "B": 12}, ticks=60)
        ratio = admitted["A"] / admitted["B"]
        assert 1.6 <= ratio <= 2.4, admitted

    run(scenario())


def test_a_tenant_back_from_idle_is_lifted_to_the_active_ones() -> None:
    async def scenario() -> None:
        admission = _admission(maxConcurrency=100)
        busy = [await admission.acquire(100, tenant="busy") for _ in range(5)]
        assert admission.fair_share_counter("busy") == 500
        idle = await admission.acquire(100, tenant="idle")
        # It starts level with the least active tenant, not at 0: idling earned it no credit.
        assert admission.fair_share_counter("idle") == 500 + 100
        for ticket in [*busy, idle]:
            admission.release(ticket)
        assert admission.fair_share_counter("busy") == 0  # all idle: nobody is owed a share

    run(scenario())


def test_output_tokens_cost_more_in_the_fair_share() -> None:
    async def scenario() -> None:
        admission = _admission(maxConcurrency=100, tenancy={"outputTokenWeight": 3})
        held = await admission.acquire(300, tenant="t", output_tokens=200)
        assert admission.fair_share_counter("t") == 100 + 3 * 200
        admission.release(held)

    run(scenario())


def test_a_full_queue_evicts_the_newest_lower_class_request_and_critical_is_refused_last() -> None:
    async def scenario() -> None:
        admission = _admission(maxQueued=3, retryAfterSeconds=7, tenancy={"sheddableQueueShare": 1.0})
        holder = await admission.acquire(1)
        old_sheddable = _task(admission.acquire(1, priority="sheddable"))
        await settle()
        new_sheddable = _task(admission.acquire(1, priority="sheddable"))
        await settle()
        standard = _task(admission.acquire(1))
        await settle()
        assert admission.queue_length == 3

        critical = _task(admission.acquire(1, priority="critical"))
        await settle()
        assert new_sheddable.done()
        with pytest.raises(Rejected) as evicted:
            new_sheddable.result()
        assert (evicted.value.reason, evicted.value.status, evicted.value.retry_after) == ("evicted", 429, 7)
        assert admission.queue_length == 3
        assert not old_sheddable.done()

        later_standard = _task(admission.acquire(1))
        await settle()
        assert isinstance(old_sheddable.exception(), Rejected)
        assert old_sheddable.exception().reason == "evicted"  # type: ignore[union-attr]

        with pytest.raises(Rejected) as full:  # no lower class left to evict
            await admission.acquire(1)
        assert full.value.reason == "queue_full"
        with pytest.raises(Rejected, match="queue is full"):
            await admission.acquire(1, priority="sheddable")

        # A critical request still finds room: the newest standard one makes it.
        second_critical = _task(admission.acquire(1, priority="critical"))
        await settle()
        assert later_standard.done()
        assert later_standard.exception().reason == "evicted"  # type: ignore[union-attr]
        named = {"critical": critical, "second_critical": second_critical, "standard": standard}
        assert await _grant_order(admission, holder, named) == ["critical", "second_critical", "standard"]

    run(scenario())


def test_sheddable_work_fills_at_most_its_share_of_the_queue() -> None:
    async def scenario() -> None:
        admission = _admission(maxQueued=4, tenancy={"sheddableQueueShare": 0.5})
        holder = await admission.acquire(1)
        sheddable = [_task(admission.acquire(1, priority="sheddable")) for _ in range(2)]
        await settle()
        with pytest.raises(Rejected, match="sheddableQueueShare") as refused:
            await admission.acquire(1, priority="sheddable")
        assert refused.value.reason == "queue_full"
        standard = [_task(admission.acquire(1)) for _ in range(2)]
        await settle()
        assert admission.queue_length == 4
        assert not any(task.done() for task in [*sheddable, *standard])
        await _cancel(*sheddable, *standard)
        admission.release(holder)

    run(scenario())


@pytest.mark.parametrize("below", ["standard", "sheddable"])
def test_the_critical_reserve_keeps_room_from_standard_and_sheddable_work(below: Priority) -> None:
    async def scenario() -> None:
        admission = _admission(maxConcurrency=10, tenancy={"criticalReserve": 0.2})
        critical = await admission.acquire(1, priority="critical")
        # Work below critical runs below 80% of the concurrency while a critical request is in flight.
        others = [await admission.acquire(1, priority=below) for _ in range(7)]
        assert admission.in_flight == 8
        blocked = _task(admission.acquire(1, priority=below))
        await settle()
        assert not blocked.done()
        second_critical = await admission.acquire(1, priority="critical")  # the reserve is critical's
        assert admission.in_flight == 9
        admission.release(second_critical)
        admission.release(critical)  # no critical work left: the reserve is free again
        await settle()
        assert blocked.done()
        for ticket in [*others, blocked.result()]:
            admission.release(ticket)

        # The same for tokens: other work stays within 80% of the token budget (950 of 1000 here).
        admission.set_token_capacity(1000)
        assert admission.token_budget == 950
        critical = await admission.acquire(95, priority="critical")
        within = await admission.acquire(570, priority=below)  # 665 in flight of 760
        over_reserve = _task(admission.acquire(142, priority=below))  # 807 would pass 760
        await settle()
        assert not over_reserve.done()
        second_critical = await admission.acquire(142, priority="critical")  # 807 of 950: critical's room
        admission.release(second_critical)
        admission.release(critical)
        await settle()
        assert over_reserve.done()  # 712 of 950, now that no critical work is left
        for ticket in (within, over_reserve.result()):
            admission.release(ticket)

    run(scenario())


def test_a_request_that_cannot_start_in_time_is_refused_at_once_once_a_rate_is_measured() -> None:
    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock, retryAfterSeconds=3)
        holder = await admission.acquire(100)
        waiting = _task(admission.acquire(100))
        await settle()
        clock.now += 1.0
        admission.release(holder)  # 100 tokens drained over 1 s of waiting
        await settle()
        running = waiting.result()
        assert admission.drain_rate == pytest.approx(100.0)

        behind = [_task(admission.acquire(1000)) for _ in range(2)]  # 2,000 tokens ahead: ~20 s
        await settle()
        late = _task(admission.acquire(100, deadline_seconds=1.0))
        await settle()
        assert late.done()  # at once, not after its deadline
        refused = late.exception()
        assert isinstance(refused, Rejected)
        assert (refused.reason, refused.status, refused.retry_after) == ("deadline", 429, 3)
        assert "measured drain rate" in str(refused)

        roomy = _task(admission.acquire(100, deadline_seconds=60.0))
        await settle()
        assert not roomy.done()  # ~20 s fits a minute
        # A lower class's queue is not ahead of a higher class.
        critical = _task(admission.acquire(100, priority="critical", deadline_seconds=1.0))
        await settle()
        assert not critical.done()
        await _cancel(*behind, roomy, critical)
        admission.release(running)

    run(scenario())


def test_a_request_with_nothing_queued_ahead_is_not_refused_by_a_slow_drain_rate() -> None:
    """A rate measured over a light load tells the demand, not the capacity: a lone request starts as
    soon as the one in flight ends, whatever its own size (a CI run refused light-load requests when
    their own tokens were counted as if they had to drain first)."""

    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock)
        holder = await admission.acquire(100)
        waiting = _task(admission.acquire(100))
        await settle()
        clock.now += 1.0
        admission.release(holder)  # measured: 100 tokens/s
        await settle()
        running = waiting.result()
        assert admission.drain_rate == pytest.approx(100.0)
        big = _task(admission.acquire(1000, deadline_seconds=1.0))  # 10 s at that rate, nothing ahead
        await settle()
        assert not big.done()
        admission.release(running)
        await settle()
        admission.release(big.result())

    run(scenario())


def test_before_a_drain_rate_is_measured_only_a_hurried_request_behind_others_is_refused_at_once() -> None:
    """A cold gate cannot say how long a request queued behind others waits. One without a deadline of
    its own queues (for queueTimeoutSeconds); one with a deadline is refused at once, not when its
    deadline runs out; one with nothing ahead of it queues, deadline or not."""

    async def scenario() -> None:
        admission = _admission()
        holder = await admission.acquire(100)
        head = _task(admission.acquire(100, deadline_seconds=1.0))
        await settle()
        assert admission.drain_rate is None and not head.done()  # nothing ahead of it
        patient = [_task(admission.acquire(1000)) for _ in range(2)]
        await settle()
        with pytest.raises(Rejected) as hurried:
            await admission.acquire(100, deadline_seconds=1.0)
        assert hurried.value.reason == "deadline" and "not measured yet" in str(hurried.value)
        assert admission.queue_length == 3 and not any(t.done() for t in patient)
        await _cancel(head, *patient)
        admission.release(holder)

    run(scenario())


async def _queued_waits(admission: Admission, clock: Clock, seconds: list[float]) -> None:
    """Each of `seconds`: one request queued alone behind a holder, granted that many seconds later."""
    for waited in seconds:
        holder = await admission.acquire(1)
        queued = _task(admission.acquire(1))
        await settle()
        clock.now += waited
        admission.release(holder)
        await settle()
        admission.release(queued.result())


def test_a_request_is_refused_at_once_when_recent_queued_requests_waited_past_its_deadline() -> None:
    """Nothing queued ahead is not enough to start in time: the room a request needs for itself opens
    only when a running request ends. Issue #38 measured every refusal's p99 at the whole 4 s deadline
    while only the queue ahead was estimated: requests with nothing ahead were let in and timed out."""

    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock)
        await _queued_waits(admission, clock, [5.0] * 4)  # each waited 5 s for a slot of its own
        holder = await admission.acquire(1)
        hurried = _task(admission.acquire(1, deadline_seconds=4.0))
        await settle()
        assert hurried.done()  # at once, with nothing queued ahead of it
        refused = hurried.exception()
        assert isinstance(refused, Rejected) and refused.reason == "deadline"
        assert "waited up to 5.0s more for room of their own" in str(refused)
        # The estimate may take three quarters of the deadline, for its own error: 5 s of 6 s is more.
        with pytest.raises(Rejected, match="more than the 75% of it"):
            await admission.acquire(1, deadline_seconds=6.0)
        patient = _task(admission.acquire(1, deadline_seconds=7.0))
        await settle()
        assert not patient.done()  # 5 s fits in 75% of 7 s
        # A critical request is not judged by what standard requests waited.
        critical = _task(admission.acquire(1, priority="critical", deadline_seconds=4.0))
        await settle()
        assert not critical.done()
        await _cancel(patient, critical)
        admission.release(holder)

    run(scenario())


def test_a_critical_request_without_a_deadline_of_its_own_queues_whatever_its_class_waited() -> None:
    """Critical is refused last: with only the queue timeout to judge by, a critical request queues
    where a standard one with the same history is refused at once (the two-key e2e lost 18 critical
    requests at arrival to an estimate learned under a sheddable flood)."""

    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock, queueTimeoutSeconds=4)
        await _queued_waits(admission, clock, [5.0] * 4)  # standard requests waited 5 s each
        for _ in range(4):  # and so did critical ones
            holder = await admission.acquire(1)
            queued = _task(admission.acquire(1, priority="critical"))
            await settle()
            clock.now += 5.0
            admission.release(holder)
            await settle()
            admission.release(queued.result())
        holder = await admission.acquire(1)
        with pytest.raises(Rejected):  # standard: refused at once on the estimate
            await admission.acquire(1)
        critical = _task(admission.acquire(1, priority="critical"))
        await settle()
        assert not critical.done()  # queued: only its queue timeout can end the wait
        admission.release(holder)
        await settle()
        admission.release(critical.result())

    run(scenario())


def test_long_waits_are_forgotten_so_a_lightly_loaded_replica_queues_again() -> None:
    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock)
        await _queued_waits(admission, clock, [5.0] * 4)
        clock.now += 21.0  # past the window: what overload taught no longer refuses anything
        holder = await admission.acquire(1)
        hurried = _task(admission.acquire(1, deadline_seconds=4.0))
        await settle()
        assert not hurried.done()
        admission.release(holder)
        await settle()
        admission.release(hurried.result())

    run(scenario())


def test_queue_timeouts_teach_the_estimate_that_let_them_in() -> None:
    """A request that timed out waited at least its timeout: after a few, the next is refused at once."""

    async def scenario() -> None:
        clock = Clock()
        admission = _admission(clock)
        holder = await admission.acquire(1)
        for _ in range(4):
            with pytest.raises(Rejected) as expired:
                await admission.acquire(1, deadline_seconds=0.05)  # the loop's own clock times it out
            assert "no slot within" in str(expired.value)
        late = _task(admission.acquire(1, deadline_seconds=0.02))
        await settle()
        assert late.done()  # refused before its deadline could pass: the test clock did not move
        refused = late.exception()
        assert isinstance(refused, Rejected) and "cannot start within its deadline" in str(refused)
        admission.release(holder)

    run(scenario())


def test_the_deadline_is_the_backstop_when_the_client_budget_runs_out_in_the_queue() -> None:
    async def scenario() -> None:
        admission = _admission()
        holder = await admission.acquire(1)
        with pytest.raises(Rejected) as expired:
            await admission.acquire(1, deadline_seconds=0.05)
        assert expired.value.reason == "deadline"
        assert admission.queue_length == 0
        with pytest.raises(Rejected, match="no slot is free now") as now:
            await admission.acquire(1, deadline_seconds=0)
        assert now.value.reason == "deadline"
        admission.release(holder)

    run(scenario())


def test_a_tenant_over_its_token_rate_is_told_when_to_retry() -> None:
    async def scenario() -> None:
        clock = Clock()
        tenancy = {"tenants": [{"name": "metered", "tokensPerMinute": 600}]}  # 10 tokens a second
        admission = _admission(clock, maxConcurrency=100, maxQueued=0, tenancy=tenancy)
        first = await admission.acquire(500, tenant="metered")
        with pytest.raises(Rejected) as over:
            await admission.acquire(500, tenant="metered")
        assert (over.value.reason, over.value.status, over.value.retry_after) == ("tenant_rate", 429, 40)
        others = await admission.acquire(500, tenant="unmetered")  # the others are not limited
        clock.now += 40.0
        second = await admission.acquire(500, tenant="metered")

        # Tokens of a request refused for another reason are given back.
        clock.now += 60.0  # a full bucket again
        admission.set_concurrency(3)
        with pytest.raises(Rejected, match="queue is full"):
            await admission.acquire(600, tenant="metered")
        admission.set_concurrency(100)
        assert (await admission.acquire(600, tenant="metered")).tokens == 600
        for ticket in (first, others, second):
            admission.release(ticket)

    run(scenario())


def test_a_refund_gives_back_what_was_charged_though_the_limits_changed_meanwhile() -> None:
    async def scenario() -> None:
        clock = Clock()
        unmetered = parse_limits({"admission": "worstCase", "maxConcurrency": 1, "queueTimeoutSeconds": 3600})
        metered = parse_limits(
            {
                "admission": "worstCase",
                "maxConcurrency": 1,
                "queueTimeoutSeconds": 3600,
                "tenancy": {"tenants": [{"name": "t", "tokensPerMinute": 600}]},  # 10 tokens a second
            }
        )
        admission = Admission(unmetered, clock=clock)
        holder = await admission.acquire(1, tenant="other")
        # Charged nothing: t had no rate when it arrived. The rate is added while it waits.
        free = _task(admission.acquire(500, tenant="t"))
        await settle()
        admission.set_limits(metered)
        charged = _task(admission.acquire(500, tenant="t"))  # 500 of the 600 taken
        await settle()
        await _cancel(free)  # gives back nothing, though t now has a rate
        with pytest.raises(Rejected) as over:
            await admission.acquire(500, tenant="t")
        assert over.value.reason == "tenant_rate"

        # Charged 500 from a bucket the limits then dropped and made anew: the new one gets nothing back.
        admission.set_limits(unmetered)
        admission.set_limits(metered)
        fresh = _task(admission.acquire(500, tenant="t"))  # a new, full bucket: 100 left
        await settle()
        await _cancel(charged)
        with pytest.raises(Rejected) as still_over:
            await admission.acquire(500, tenant="t")
        assert still_over.value.reason == "tenant_rate"

        # To its own bucket a refund gives back what it took: the full 600 again.
        await _cancel(fresh)
        whole = _task(admission.acquire(600, tenant="t"))
        await settle()
        assert not whole.done()  # past the rate, waiting for the slot
        await _cancel(whole)
        admission.release(holder)

    run(scenario())


def test_a_live_edit_of_the_classes_reorders_the_queue_at_once() -> None:
    async def scenario() -> None:
        admission = _admission()
        holder = await admission.acquire(1)
        named = {}
        classes: tuple[tuple[str, Priority | None], ...] = (("a", None), ("b", None), ("c", "standard"))
        for tenant, priority in classes:
            named[tenant] = _task(admission.acquire(1, tenant=tenant, priority=priority))
            await settle()
        promoted = {"tenants": [{"name": "b", "priority": "critical"}, {"name": "c", "priority": "critical"}]}
        admission.set_limits(
            parse_limits({"admission": "worstCase", "maxConcurrency": 1, "tenancy": promoted})
        )
        # c named its class (its key did): the limits do not move it.
        assert admission.queued_by_tenant() == {
            ("a", "standard"): 1,
            ("b", "critical"): 1,
            ("c", "standard"): 1,
        }
        assert await _grant_order(admission, holder, named) == ["b", "a", "c"]

    run(scenario())


def test_per_tenant_metrics_keep_the_top_tenants_and_count_the_rest_as_other() -> None:
    async def scenario() -> None:
        admission = _admission()
        metrics = GateMetrics(admission)
        tenants = metrics.tenants
        for index in range(25):  # each larger than all before it: the top ten keep changing
            tenants.admitted(f"big-{index:02d}", "standard", 1000 * (index + 1))
            tenants.refused(f"big-{index:02d}", "standard", "queue_full")
        for index in range(30):
            tenants.admitted(f"small-{index:02d}", "sheddable", 1)
            tenants.refused(f"small-{index:02d}", "sheddable", "evicted")
        tenants.admitted("default", "standard", 10**9)  # the default tenant by its name
        holder = await admission.acquire(1, tenant="default")
        queued = [_task(admission.acquire(1, tenant=f"small-{index:02d}")) for index in range(20)]
        await settle()

        text = generate_latest(metrics.registry).decode()
        families = {family.name: family for family in text_string_to_metric_families(text)}
        top = {"default", *(f"big-{index:02d}" for index in range(16, 25))}
        for name in (
            "kvant_gate_tenant_admitted_tokens",
            "kvant_gate_tenant_rejected",
            "kvant_gate_tenant_queued",
        ):
            labels = {s.labels["tenant"] for s in families[name].samples if not s.name.endswith("_created")}
            assert labels <= top | {OTHER_TENANTS}, name
            assert len(labels) <= TOP_TENANTS + 1, name
        admitted = {
            s.labels["tenant"]: s.value
            for s in families["kvant_gate_tenant_admitted_tokens"].samples
            if s.name.endswith("_total") and s.labels["priority"] == "standard"
        }
        # "other" is there too, at 0: its series are made at start so that a rate over them is 0, not
        # absent (no standard request was ever counted as "other" here).
        assert set(admitted) == top | {OTHER_TENANTS}
        assert admitted[OTHER_TENANTS] == 0
        assert admitted["big-24"] == 25_000
        other = [
            s.value
            for s in families["kvant_gate_tenant_admitted_tokens"].samples
            if s.name.endswith("_total") and s.labels == {"tenant": OTHER_TENANTS, "priority": "sheddable"}
        ]
        assert other == [30]
        waiting = {
            (s.labels["tenant"], s.labels["priority"]): s.value
            for s in families["kvant_gate_tenant_queued"].samples
        }
        assert waiting[(OTHER_TENANTS, "standard")] == 20
        assert sum(waiting.values()) == 20
        await _cancel(*queued)
        admission.release(holder)

    run(scenario())
