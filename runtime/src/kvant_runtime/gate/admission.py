"""Admission: who may run now, who waits, who is turned away. Pure logic, no HTTP.

A request costs `tokens`, what it reserves: its estimated prompt plus, per sequence, its output
limit (`admission: worstCase`) or the forecast of its output (`forecast`, see `forecast`).
In `enforce` mode it runs when both hold:
- in-flight requests < the effective concurrency;
- in-flight tokens + its tokens + `margin(sequences in flight with it)` ≤ the token budget (the
  margin is the forecast's allowance for the in-flight total's spread; 0 in worstCase): the engine's
  max_total_num_tokens less `ESTIMATE_HEADROOM` for the prompt estimate's error (kvant_runtime.tokens).
  With worst-case reservations each request reserves more than the engine ever holds for it, so
  requests that fit the budget together can never make the engine retract; forecast reservations
  trade that bound for admitting what answers that end early really take. (`targetTokenUsage` is the
  local loop's target for the engine's live token_usage, see `concurrency`, not a cap on
  reservations.) A request whose worst case is larger than the whole budget is refused with 413, or
  with `oversizeRequests: runAlone` runs alone, so it is never starved. While the engine's capacity
  is unknown (and no planned capacity was given) the token check is skipped.

Otherwise it waits in a bounded queue, at most `queueTimeoutSeconds`. Many tenants share it
(kvant_contracts.tenancy); the next request to run is chosen by class, then fair share among the
tenants, then deadline, then arrival (see `fair_queue`). The chosen request is not overtaken: a large
one that does not fit yet blocks the smaller ones behind it, so it is never starved.

Shedding, lowest class first: sheddable requests fill at most `sheddableQueueShare` of maxQueued. A
request that finds the queue (or sheddable work its share) full evicts a queued one (429 + Retry-After,
reason `evicted`) and takes its place: the newest of the lowest class below its own, else, in its own
class, the newest of the tenant furthest over its fair share if further over than its own
(`FairQueue.victim`); otherwise it is refused (`queue_full`). So critical is refused last, and a tenant
sending more than its share cannot hold the queue against one sending less. While a critical request
is queued or in flight, other requests are admitted only below (1 - `criticalReserve`) of the
concurrency and of the token budget, keeping room for the critical burst.
Running requests are never evicted: that would throw away the KV cache they have computed.

Deadlines: a request waits at most min(queueTimeoutSeconds, its `X-Kvant-Deadline-Ms` budget). Its wait
is estimated from the tokens queued ahead of it (same or higher class) over the measured drain rate
(`drain_rate`); when it cannot start in time it is refused at once (429, reason `deadline`) instead of
waiting out its timeout. The timeout stays the backstop.

A tenant with `tokensPerMinute` has a token bucket (`rate_buckets`); a request over it is refused with
429 and the seconds until it would fit (reason `tenant_rate`).

`observe` admits everything and reports which limit it would have waited for; `off` admits everything.
In-flight counts are kept in every mode, so switching modes is seamless.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from kvant_contracts.limits import Limits
from kvant_contracts.tenancy import DEFAULT_TENANT, PRIORITIES, Priority, rank
from kvant_runtime.gate import refusals
from kvant_runtime.gate.drain_rate import DrainRate
from kvant_runtime.gate.fair_queue import FairQueue, Waiter
from kvant_runtime.gate.rate_buckets import RateBuckets
from kvant_runtime.tokens import ESTIMATE_HEADROOM


@dataclass(frozen=True)
class Ticket:
    """A granted slot. Hand it back with `Admission.release` exactly once."""

    tokens: int
    waited_seconds: float
    over_limits: tuple[str, ...] = ()  # observe mode: the limits enforce would have waited for
    sequences: int = 1
    tenant: str = DEFAULT_TENANT
    priority: Priority = "standard"  # the class it was admitted in


class Admission:
    """The gate's admission state: limits, effective concurrency, token capacity, queue."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.concurrency = limits.concurrency_ceiling
        self.token_capacity: int | None = None
        self.in_flight = 0
        self.in_flight_tokens = 0
        self.in_flight_sequences = 0
        # Tokens kept free on top of the reservations for n sequences in flight (forecast admission).
        self.margin: Callable[[int], int] = lambda _sequences: 0
        self._clock = clock
        self._queue = FairQueue()
        self._arrivals = itertools.count()
        self._critical_in_flight = 0
        self._rates = RateBuckets(clock)
        self._drain = DrainRate()

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    @property
    def queued_tokens(self) -> int:
        return sum(self._queue.tokens.values())

    @property
    def demand(self) -> float:
        """What this replica is asked to hold over what it may hold now (kvant_contracts.autoscaling):
        the larger of the tokens and the requests held and waiting, over the token budget and over the
        effective concurrency. Over the effective concurrency, not the configured one, so a replica
        whose local loop narrowed it shows more demand and the autoscaler adds replicas."""
        requests = (self.in_flight + self.queue_length) / max(self.concurrency, 1)
        budget = self.token_budget
        if budget is None or budget <= 0:  # capacity unknown: requests are the only measure
            return requests
        return max(requests, (self.in_flight_tokens + self.queued_tokens) / budget)

    @property
    def token_budget(self) -> int | None:
        """The most tokens in flight at once, or None while the engine's capacity is unknown."""
        if self.token_capacity is None:
            return None
        return int((1.0 - ESTIMATE_HEADROOM) * self.token_capacity)

    @property
    def drain_rate(self) -> float | None:
        """Tokens released per second while requests wait, or None until measured."""
        return self._drain.value

    def queued_by_tenant(self) -> dict[tuple[str, Priority], int]:
        """Requests waiting, by (tenant, class in force)."""
        return self._queue.by_tenant()

    def fair_share_counter(self, tenant: str) -> float:
        """The tenant's virtual token counter (0 for one never seen or idle since everything was)."""
        return self._queue.counter(tenant)

    def set_limits(self, limits: Limits) -> None:
        """New limits, in force at once: queued requests are re-ordered by the new classes and weights.
        The effective concurrency is the local loop's to set (`set_concurrency`)."""
        self.limits = limits
        self._queue.reclassify(limits.tenancy)
        self._rates.drop_unlimited(limits.tenancy)
        self._dispatch()

    def set_concurrency(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._dispatch()

    def set_token_capacity(self, capacity: int | None) -> None:
        self.token_capacity = capacity
        self._dispatch()

    async def acquire(
        self,
        tokens: int,
        worst_case: int | None = None,
        sequences: int = 1,
        *,
        tenant: str = DEFAULT_TENANT,
        priority: Priority | None = None,
        deadline_seconds: float | None = None,
        output_tokens: int = 0,
    ) -> Ticket:
        """Waits for a slot for a request of `sequences` reserving `tokens` (at most `worst_case`, by
        default the same), of which `output_tokens` are reserved output, for `tenant` in class
        `priority` (None: the tenant's class in the limits), with `deadline_seconds` the client's own
        time budget if it gave one. Raises `refusals.Rejected` when the queue is full (or the request is
        evicted from it), the wait times out or cannot end in time, the tenant is over its token rate,
        or even the worst case could never fit the whole budget."""
        worst = tokens if worst_case is None else worst_case
        tenancy = self.limits.tenancy
        klass = tenancy.priority_of(tenant, priority)
        output = min(max(output_tokens, 0), tokens)
        if self.limits.mode != "enforce":
            over: tuple[str, ...] = ()
            if self.limits.mode == "observe":
                over = self._over_limits(tokens, sequences, klass)
                if isinstance(self._rates.take(tenant, tokens, tenancy.tokens_per_minute(tenant)), float):
                    over += ("tenant_rate",)
            self._queue.enter(tenant)
            self._take(tokens, sequences, klass)
            self._queue.charge(self.limits.tenancy, tenant, tokens, output)
            return Ticket(tokens, 0.0, over, sequences, tenant, klass)
        budget = self.token_budget
        if budget is not None and worst > budget and self.limits.oversizeRequests == "refuse":
            raise refusals.too_large(worst, budget)
        charge = self._rates.take(tenant, tokens, tenancy.tokens_per_minute(tenant))
        if isinstance(charge, float):
            raise refusals.over_rate(tenant, tenancy.tokens_per_minute(tenant), tokens, charge)
        try:
            return await self._admit_or_wait(
                tokens=tokens,
                sequences=sequences,
                tenant=tenant,
                explicit=priority,
                klass=klass,
                output=output,
                deadline_seconds=deadline_seconds,
            )
        except BaseException:  # refused, evicted, timed out, or the client left: the tokens were not used
            self._rates.refund(charge)  # what was charged, whatever the limits say now
            raise

    def release(self, ticket: Ticket) -> None:
        self.in_flight -= 1
        self.in_flight_tokens -= ticket.tokens
        self.in_flight_sequences -= ticket.sequences
        if ticket.priority == "critical":
            self._critical_in_flight -= 1
        self._drain.count(self._clock(), ticket.tokens)
        self._queue.leave(ticket.tenant)
        self._dispatch()

    async def _admit_or_wait(
        self,
        *,
        tokens: int,
        sequences: int,
        tenant: str,
        explicit: Priority | None,
        klass: Priority,
        output: int,
        deadline_seconds: float | None,
    ) -> Ticket:
        limits = self.limits
        now = self._clock()
        timeout, reason = limits.queueTimeoutSeconds, "queue_timeout"
        if deadline_seconds is not None and deadline_seconds < timeout:
            timeout, reason = max(deadline_seconds, 0.0), "deadline"
        waiter = Waiter(
            tokens,
            sequences,
            asyncio.get_running_loop().create_future(),
            tenant,
            explicit,
            klass,
            output,
            next(self._arrivals),
            now,
            now + timeout,
        )
        if self._queue.goes_first(waiter) and not self._over_limits(tokens, sequences, klass):
            self._queue.enter(tenant)
            self._take(tokens, sequences, klass)
            self._queue.charge(self.limits.tenancy, tenant, tokens, output)
            return Ticket(tokens, 0.0, sequences=sequences, tenant=tenant, priority=klass)
        self._refuse_if_late(waiter, timeout)
        self._make_room(waiter)
        self._queue.enter(tenant)
        self._queue.push(waiter)
        self._drain.backlog(self._clock(), waiting=len(self._queue) > 0)
        return await self._wait(waiter, timeout, reason)

    def _refuse_if_late(self, waiter: Waiter, timeout: float) -> None:
        """Refuses at once a request the drain rate says cannot start within its deadline."""
        now = self._clock()
        ahead = sum(self._queue.tokens[p] for p in PRIORITIES if rank(p) <= rank(waiter.priority))
        why = self._drain.why_late(now, ahead, timeout)
        if why is not None:
            raise refusals.too_late(self.limits, timeout, why)

    def _make_room(self, waiter: Waiter) -> None:
        """Refuses the arrival, or evicts the queued request `FairQueue.victim` gives up for it, when
        the queue (or, for sheddable work, its share of it) has no room."""
        limits = self.limits
        queue = self._queue
        if waiter.priority == "sheddable":
            room = int(limits.tenancy.sheddableQueueShare * limits.maxQueued)
            if queue.waiters["sheddable"] >= room and not self._evict_for(waiter):
                raise refusals.sheddable_share_full(limits, queue.waiters["sheddable"])
        if len(queue) >= limits.maxQueued and not self._evict_for(waiter):
            raise refusals.queue_full(limits, len(queue))

    def _evict_for(self, waiter: Waiter) -> bool:
        """Evicts the request the queue gives up for `waiter` (429 + Retry-After); False when none."""
        victim = self._queue.victim(self.limits.tenancy, waiter)
        if victim is None:
            return False
        self._queue.remove(victim)
        self._queue.leave(victim.tenant)
        victim.future.set_exception(
            refusals.evicted(self.limits, waiter.priority, victim.priority, victim.tenant)
        )
        return True

    async def _wait(self, waiter: Waiter, timeout: float, reason: str) -> Ticket:
        try:
            async with asyncio.timeout(timeout):
                await waiter.future
        except TimeoutError:
            if not waiter.granted:
                self._forget(waiter)
                raise refusals.timed_out(
                    self.limits, reason, timeout, self.in_flight, self.in_flight_tokens
                ) from None
        except asyncio.CancelledError:
            # The client went away: give back whatever it held or was about to get.
            if waiter.granted:
                self.release(_granted_ticket(waiter))
            else:
                self._forget(waiter)
            raise
        return _granted_ticket(waiter, self._clock() - waiter.enqueued_at)

    def _over_limits(self, tokens: int, sequences: int, priority: Priority = "standard") -> tuple[str, ...]:
        over: list[str] = []
        share = 1.0
        if priority != "critical" and (self._critical_in_flight or self._queue.waiters["critical"]):
            share = 1.0 - self.limits.tenancy.criticalReserve  # room held back for critical work
        if self.in_flight >= share * self.concurrency:
            over.append("concurrency")
        budget = self.token_budget
        if budget is not None and self.in_flight > 0:
            margin = self.margin(self.in_flight_sequences + sequences)
            if self.in_flight_tokens + tokens + margin > share * budget:
                over.append("token_budget")
        return tuple(over)

    def _take(self, tokens: int, sequences: int, priority: Priority) -> None:
        self.in_flight += 1
        self.in_flight_tokens += tokens
        self.in_flight_sequences += sequences
        if priority == "critical":
            self._critical_in_flight += 1

    def _dispatch(self) -> None:
        """Grants waiting requests in queue order while the next one fits."""
        while (head := self._queue.head()) is not None:
            if head.future.done():  # cancelled, its handler not yet run: no slot for it
                self._queue.remove(head)
                self._queue.leave(head.tenant)
                continue
            if self.limits.mode == "enforce" and self._over_limits(
                head.tokens, head.sequences, head.priority
            ):
                break
            self._queue.remove(head)
            self._take(head.tokens, head.sequences, head.priority)
            self._queue.charge(self.limits.tenancy, head.tenant, head.tokens, head.output_tokens)
            head.granted = True
            head.future.set_result(None)
        self._drain.backlog(self._clock(), waiting=len(self._queue) > 0)

    def _forget(self, waiter: Waiter) -> None:
        if self._queue.remove(waiter):
            self._queue.leave(waiter.tenant)
        # It may have been the one blocking the rest.
        self._dispatch()


def _granted_ticket(waiter: Waiter, waited: float = 0.0) -> Ticket:
    return Ticket(
        waiter.tokens, waited, sequences=waiter.sequences, tenant=waiter.tenant, priority=waiter.priority
    )
