"""Admission: who may run now, who waits, who is turned away. Pure logic, no HTTP; the one writer.

The stages (`kvant_runtime.gate.admit`):
1. **The door** (`acquire`): one `Waiter` is built; a request larger than the whole token budget is
   refused (413) unless `oversizeRequests: runAlone`; a tenant over its token rate is refused (429).
2. **The engine's room** (`admit.room`, set by the gate's loops) and **the policies**
   (`admit.policies.over`): which limits the request would break if started now. In `engine` admission
   (the default) the engine reserves KV, and the gate keeps its queue short and bounds the cache's
   future peak (`admit.engine_queue`, `admit.kv_peak`); in `worstCase` and `forecast` the gate
   reserves tokens itself (`admit.token_budget`). Every mode caps requests in flight at the effective
   concurrency, which the local loop narrows when the engine retracts (`gate.concurrency`).
3. **The waiting room's order** (`admit.waiting_room`): class, then fair share among tenants, then
   deadline, then arrival. The chosen request is not overtaken.
4. **The grant** (`_grant`): the only place a request starts to hold. On arrival when it would lead
   the queue and breaks no policy; otherwise by `_dispatch` when a release or a new room lets the
   head through.
5. **Release** (`release`, in the proxy's `finally`): the account, the tenant's share, the drain rate.

Before queueing, a request that `queue_wait` says cannot start within its deadline is refused at once
(429 `deadline`), and a full queue evicts or refuses (`admit.shedding`). A request waits at most
min(queueTimeoutSeconds, its `X-Kvant-Deadline-Ms` budget).

`observe` admits everything and reports which policies would have held it; `off` admits everything.
In-flight counts are kept in every mode, so switching modes is seamless.
See docs/concepts/admission.md ("The gate, per pod").
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import replace

from kvant_contracts.limits import Limits, ProtectionMode
from kvant_contracts.tenancy import DEFAULT_TENANT, Priority
from kvant_runtime.gate import refusals
from kvant_runtime.gate.admit import shedding
from kvant_runtime.gate.admit.claims import Held, Ticket, Waiter
from kvant_runtime.gate.admit.fair_share import FairShare
from kvant_runtime.gate.admit.policies import over
from kvant_runtime.gate.admit.room import Room
from kvant_runtime.gate.admit.waiting_room import WaitingRoom
from kvant_runtime.gate.engine_load import EngineLoad
from kvant_runtime.gate.queue_wait import QueueWait
from kvant_runtime.gate.rate_buckets import RateBuckets

__all__ = ["Admission", "Ticket"]


class Admission:
    """The gate's admission state: limits, the engine's room, what is held, the waiting room."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.room = Room(concurrency=limits.concurrency_ceiling)
        self.held = Held()
        self._clock = clock
        self._share = FairShare()
        self._waiting = WaitingRoom(self._share)
        self._arrivals = itertools.count()
        self._rates = RateBuckets(clock)
        self._wait = QueueWait()

    # --- read-only views (metrics, drain, tests) ---------------------------------------------------
    @property
    def concurrency(self) -> int:
        return self.room.concurrency

    @property
    def token_capacity(self) -> int | None:
        return self.room.token_capacity

    @property
    def token_budget(self) -> int | None:
        return self.room.token_budget

    @property
    def margin(self) -> Callable[[int], int]:
        return self.room.margin

    @property
    def in_flight(self) -> int:
        return self.held.requests

    @property
    def in_flight_tokens(self) -> int:
        return self.held.tokens

    @property
    def in_flight_sequences(self) -> int:
        return self.held.sequences

    @property
    def queue_length(self) -> int:
        return len(self._waiting)

    @property
    def queued_tokens(self) -> int:
        return sum(self._waiting.tokens.values())

    @property
    def demand(self) -> float:
        """What this replica is asked to hold over what it may hold now (kvant_contracts.autoscaling):
        the larger of the tokens and the requests held and waiting, over the token budget and over the
        effective concurrency. Over the effective concurrency, not the configured one, so a replica
        whose local loop narrowed it shows more demand and the autoscaler adds replicas."""
        requests = (self.held.requests + self.queue_length) / max(self.concurrency, 1)
        budget = self.token_budget
        if budget is None or budget <= 0:  # capacity unknown: requests are the only measure
            return requests
        return max(requests, (self.held.tokens + self.queued_tokens) / budget)

    @property
    def drain_rate(self) -> float | None:
        """Tokens released per second while requests wait, or None until measured."""
        return self._wait.drain.value

    def queued_by_tenant(self) -> dict[tuple[str, Priority], int]:
        """Requests waiting, by (tenant, class in force)."""
        return self._waiting.by_tenant()

    def fair_share_counter(self, tenant: str) -> float:
        """The tenant's virtual token counter (0 for one never seen or idle since everything was)."""
        return self._share.counter(tenant)

    # --- what changes the room or the rules -------------------------------------------------------
    def set_limits(self, limits: Limits) -> None:
        """New limits, in force at once: queued requests are re-ordered by the new classes and weights.
        The effective concurrency is the local loop's to set (`set_concurrency`)."""
        self.limits = limits
        self._waiting.reclassify(limits.tenancy)
        self._rates.drop_unlimited(limits.tenancy)
        self._dispatch()

    def set_room(self, room: Room) -> None:
        self.room = room
        self._dispatch()

    def set_concurrency(self, concurrency: int) -> None:
        self.set_room(replace(self.room, concurrency=concurrency))

    def set_token_capacity(self, capacity: int | None) -> None:
        self.set_room(replace(self.room, token_capacity=capacity))

    def set_margin(self, margin: Callable[[int], int]) -> None:
        self.set_room(replace(self.room, margin=margin))

    def set_engine_load(self, load: EngineLoad | None) -> None:
        self.set_room(replace(self.room, engine=load))

    # --- the request's path -----------------------------------------------------------------------
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
        limits = self.limits
        now = self._clock()
        timeout, reason = limits.queueTimeoutSeconds, "queue_timeout"
        if deadline_seconds is not None and deadline_seconds < timeout:
            timeout, reason = max(deadline_seconds, 0.0), "deadline"
        waiter = Waiter(
            tokens=tokens,
            sequences=sequences,
            future=asyncio.get_running_loop().create_future(),
            tenant=tenant,
            explicit=priority,
            priority=limits.tenancy.priority_of(tenant, priority),
            output_tokens=min(max(output_tokens, 0), tokens),
            arrival=next(self._arrivals),
            enqueued_at=now,
            deadline=now + timeout,
        )
        per_minute = limits.tenancy.tokens_per_minute(tenant)
        if limits.mode != ProtectionMode.ENFORCE:
            observed = self._over(waiter) if limits.mode == ProtectionMode.OBSERVE else ()
            # Observe spends the bucket as enforce would, so it reports what enforce would refuse.
            if limits.mode == ProtectionMode.OBSERVE and isinstance(
                self._rates.take(tenant, tokens, per_minute), float
            ):
                observed += ("tenant_rate",)
            return self._grant(waiter, over=observed)
        budget = self.token_budget
        worst = tokens if worst_case is None else worst_case
        if budget is not None and worst > budget and limits.oversizeRequests == "refuse":
            raise refusals.too_large(worst, budget)
        charge = self._rates.take(tenant, tokens, per_minute)
        if isinstance(charge, float):
            raise refusals.over_rate(tenant, per_minute, tokens, charge)
        try:
            if self._waiting.would_lead(waiter) and not self._over(waiter):
                return self._grant(waiter)
            return await self._queue(waiter, timeout, reason)
        except BaseException:  # refused, evicted, timed out, or the client left: the tokens were not used
            self._rates.refund(charge)  # what was charged, whatever the limits say now
            raise

    def release(self, ticket: Ticket) -> None:
        self.held.give(ticket, self._clock())
        self._wait.drain.count(self._clock(), ticket.tokens)
        self._share.leave(ticket.tenant)
        self._dispatch()

    # --- inside -------------------------------------------------------------------------------------
    def _grant(self, waiter: Waiter, over: tuple[str, ...] = (), *, queued: bool = False) -> Ticket:
        """The only place a request starts to hold: the in-flight account and its tenant's charge. A
        request granted from the queue has counted towards its tenant's activity since it queued."""
        ticket = waiter.ticket(self._clock(), over)
        if not queued:
            self._share.enter(waiter.tenant)
        self.held.take(ticket)
        self._share.charge(self.limits.tenancy, waiter.tenant, waiter.tokens, waiter.output_tokens)
        return ticket

    def _over(self, waiter: Waiter) -> tuple[str, ...]:
        return over(
            waiter.tokens,
            waiter.output_tokens,
            sequences=waiter.sequences,
            priority=waiter.priority,
            held=self.held,
            room=self.room,
            limits=self.limits,
            critical_waiting=self._waiting.waiters["critical"] > 0,
            now=self._clock(),
            drain_rate=self.drain_rate,
        )

    async def _queue(self, waiter: Waiter, timeout: float, reason: str) -> Ticket:
        now = self._clock()
        # What must drain before it can start: what is queued ahead of it, at the drain rate. Not its
        # own tokens (a rate measured over a light load tells the demand, not the capacity, and would
        # refuse it for nothing): the wait for its own room is what recent queued requests waited
        # beyond their drain part (`queue_wait`).
        ahead = self._waiting.tokens_at_or_above(waiter.priority)
        drain = self._wait.drain_seconds(now, ahead, hurried=reason == "deadline")
        why = self._wait.why_late(now, waiter.priority, ahead, drain, timeout)
        # A critical request without a deadline of its own is not refused on an estimate: it goes
        # first, and only the queue timeout ends its wait. The estimate learns from its class's recent
        # waits, which under a sheddable flood are long, and refused 18 critical requests of the
        # two-key e2e at arrival that the queue would have served (critical is refused last).
        if why is not None and waiter.priority == "critical" and reason != "deadline":
            why = None
        if why is not None:
            raise refusals.too_late(self.limits, timeout, why)
        evicted = shedding.make_room(self._waiting, self.limits, waiter)
        if evicted is not None:
            self._leave_queue(evicted)
            evicted.future.set_exception(
                refusals.evicted(self.limits, waiter.priority, evicted.priority, evicted.tenant)
            )
        self._share.enter(waiter.tenant)  # queued work counts towards its tenant's share
        self._waiting.push(waiter)
        self._wait.drain.backlog(now, waiting=True)
        try:
            async with asyncio.timeout(timeout):
                ticket = await asyncio.shield(waiter.future)
            self._wait.left_queue(self._clock(), ticket.priority, drain, ticket.waited_seconds)
            return ticket
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # granted as the timeout fired: it holds its slot
            self._forget(waiter)
            self._wait.left_queue(self._clock(), waiter.priority, drain, timeout)  # it waited at least that
            raise refusals.timed_out(
                self.limits, reason, timeout, self.held.requests, self.held.tokens
            ) from None
        except asyncio.CancelledError:
            # The client went away: give back whatever it held or was about to get.
            if waiter.future.done() and waiter.future.exception() is None:
                self.release(waiter.future.result())
            else:
                self._forget(waiter)
            raise

    def _dispatch(self) -> None:
        """Grants waiting requests in queue order while the head breaks no policy; stops at the first
        that does, so the chosen request is never overtaken."""
        while (head := self._waiting.head()) is not None:
            if self.limits.mode == ProtectionMode.ENFORCE and self._over(head):
                break
            self._waiting.remove(head)
            head.future.set_result(self._grant(head, queued=True))
        self._wait.drain.backlog(self._clock(), waiting=len(self._waiting) > 0)

    def _leave_queue(self, waiter: Waiter) -> None:
        """Out of the queue without a grant: its tenant has one request fewer."""
        if self._waiting.remove(waiter):
            self._share.leave(waiter.tenant)

    def _forget(self, waiter: Waiter) -> None:
        self._leave_queue(waiter)
        self._dispatch()  # it may have been the one blocking the rest
