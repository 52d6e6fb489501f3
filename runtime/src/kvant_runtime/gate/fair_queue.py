"""The order of the gate's queue: who of the waiting requests goes next, and who is given up when it
is full. Pure bookkeeping, no waiting.

Many tenants share the queue (kvant_contracts.tenancy); the next request to run is chosen by
1. priority class: critical, then standard, then sheddable;
2. within a class, fair share: each tenant has a virtual token counter (VTC, Sheng et al., "Fairness
   in Serving Large Language Models", OSDI '24) that grows by (prompt + outputTokenWeight * reserved
   output tokens) / weight as its requests are admitted; the queued tenant with the smallest counter
   goes next. A tenant that becomes active again (nothing queued or in flight before) is lifted to
   the smallest counter among the active ones, so idling earns no credit;
3. then the earliest deadline, then arrival.

A full queue gives up (`victim`) the newest request of the lowest class queued, and within the
arrival's own class that of the tenant furthest over its fair share (the highest counter, counting
its queued requests as admitted), but only when that tenant is further over than the arrival's: the
counter decides at the door as it does in the queue.
"""

from __future__ import annotations

import asyncio
import heapq
from dataclasses import dataclass

from kvant_contracts.tenancy import PRIORITIES, Priority, Tenancy, rank

# Fair-share counters kept for tenants with nothing queued or in flight, at most; past it they are
# dropped (a tenant back later is lifted to the active ones anyway).
MAX_IDLE_COUNTERS = 4096


@dataclass(eq=False)  # identity: two waiters for the same tokens are different requests
class Waiter:
    tokens: int
    sequences: int
    future: asyncio.Future[None]
    tenant: str
    explicit: Priority | None  # the class the request named (key or trusted header); None: the limits'
    priority: Priority  # the class in force, re-resolved when the limits change
    output_tokens: int  # of `tokens`, the reserved output (charged outputTokenWeight in fair share)
    arrival: int  # a sequence number: ties in the queue order go to the earlier arrival
    enqueued_at: float
    deadline: float  # on the admission's clock
    granted: bool = False


class FairQueue:
    """Queued waiters by (class, tenant), each a heap by (deadline, arrival), with running totals; and
    the tenants' fair-share counters, which count what runs as well as what waits."""

    def __init__(self) -> None:
        self.groups: dict[tuple[Priority, str], list[tuple[float, int, Waiter]]] = {}
        self.waiters: dict[Priority, int] = dict.fromkeys(PRIORITIES, 0)
        self.tokens: dict[Priority, int] = dict.fromkeys(PRIORITIES, 0)
        self._counters: dict[str, float] = {}  # VTC, per tenant
        self._active: dict[str, int] = {}  # per tenant with any: requests queued plus in flight

    def __len__(self) -> int:
        return sum(self.waiters.values())

    def push(self, waiter: Waiter) -> None:
        group = self.groups.setdefault((waiter.priority, waiter.tenant), [])
        heapq.heappush(group, (waiter.deadline, waiter.arrival, waiter))
        self.waiters[waiter.priority] += 1
        self.tokens[waiter.priority] += waiter.tokens

    def remove(self, waiter: Waiter) -> bool:
        key = (waiter.priority, waiter.tenant)
        group = self.groups.get(key, [])
        for index, (_, _, queued) in enumerate(group):
            if queued is waiter:
                group[index] = group[-1]
                group.pop()
                heapq.heapify(group)
                if not group:
                    del self.groups[key]
                self.waiters[waiter.priority] -= 1
                self.tokens[waiter.priority] -= waiter.tokens
                return True
        return False

    def reclassify(self, tenancy: Tenancy) -> None:
        """Re-resolves every queued request's class under new limits; the counters stay as they are."""
        waiters = [entry[2] for group in self.groups.values() for entry in group]
        self.groups = {}
        self.waiters = dict.fromkeys(PRIORITIES, 0)
        self.tokens = dict.fromkeys(PRIORITIES, 0)
        for waiter in waiters:
            waiter.priority = tenancy.priority_of(waiter.tenant, waiter.explicit)
            self.push(waiter)

    def by_tenant(self) -> dict[tuple[str, Priority], int]:
        return {(tenant, priority): len(group) for (priority, tenant), group in self.groups.items()}

    def victim(self, tenancy: Tenancy, arrival: Waiter) -> Waiter | None:
        """The queued request a full queue gives up for `arrival`, or None when the arrival is refused.

        From the lowest class with any queued at or below the arrival's (sheddable before standard;
        never a higher class), the newest request of the tenant furthest over its fair share: the
        highest counter as it would be were everything the tenant has queued admitted. In a lower
        class that request always goes; in the arrival's own class only when its tenant would still be
        further over than the arrival's tenant with the arrival. So a tenant sending more than its
        share cannot hold the queue's slots against one sending less, and two level tenants do not
        evict each other's requests back and forth."""
        for lower in reversed(PRIORITIES):
            if rank(lower) < rank(arrival.priority):
                return None
            queued = {
                tenant: [entry[2] for entry in group if not entry[2].future.done()]
                for (priority, tenant), group in self.groups.items()
                if priority == lower
            }
            queued = {tenant: waiters for tenant, waiters in queued.items() if waiters}
            if not queued:
                continue
            projected = self._projected(tenancy)
            furthest = max(queued, key=lambda tenant: projected[tenant])
            if lower == arrival.priority:
                mine = projected.get(arrival.tenant, self._lifted(arrival.tenant)) + cost(
                    tenancy, arrival.tenant, arrival.tokens, arrival.output_tokens
                )
                if projected[furthest] <= mine:
                    return None
            return max(queued[furthest], key=lambda waiter: waiter.arrival)
        return None

    def counter(self, tenant: str) -> float:
        return self._counters.get(tenant, 0.0)

    def head(self) -> Waiter | None:
        """The request that goes next: class, then the tenant's fair-share counter, deadline, arrival."""
        best: tuple[tuple[int, float, float, int], Waiter] | None = None
        for (priority, tenant), group in self.groups.items():
            deadline, arrival, waiter = group[0]
            key = self._key(priority, tenant, deadline, arrival)
            if best is None or key < best[0]:
                best = (key, waiter)
        return None if best is None else best[1]

    def goes_first(self, waiter: Waiter) -> bool:
        """Whether an arrival would be next in the queue, its tenant's counter lifted as it would be."""
        head = self.head()
        if head is None:
            return True
        counter = self._lifted(waiter.tenant)
        mine = (rank(waiter.priority), counter, waiter.deadline, waiter.arrival)
        first = self.groups[(head.priority, head.tenant)][0]
        return mine < self._key(head.priority, head.tenant, first[0], first[1])

    def enter(self, tenant: str) -> None:
        """One more request of the tenant's queued or in flight."""
        if tenant not in self._active:
            self._counters[tenant] = self._lifted(tenant)
        self._active[tenant] = self._active.get(tenant, 0) + 1

    def leave(self, tenant: str) -> None:
        """One request of the tenant's fewer queued or in flight."""
        left = self._active.get(tenant, 0) - 1
        if left > 0:
            self._active[tenant] = left
            return
        self._active.pop(tenant, None)
        if not self._active:
            # Idle: nobody waits and nothing runs, so no share is owed; everyone starts level.
            self._counters.clear()
        elif len(self._counters) > len(self._active) + MAX_IDLE_COUNTERS:
            self._counters = {name: self._counters.get(name, 0.0) for name in self._active}

    def charge(self, tenancy: Tenancy, tenant: str, tokens: int, output: int) -> None:
        """Counts an admitted request of `tokens`, `output` of them reserved output, to its tenant."""
        self._counters[tenant] = self._counters.get(tenant, 0.0) + cost(tenancy, tenant, tokens, output)

    def _key(
        self, priority: Priority, tenant: str, deadline: float, arrival: int
    ) -> tuple[int, float, float, int]:
        return (rank(priority), self._counters.get(tenant, 0.0), deadline, arrival)

    def _projected(self, tenancy: Tenancy) -> dict[str, float]:
        """Each queued tenant's counter (lifted, if it is not active) were all its queued requests
        admitted."""
        projected: dict[str, float] = {}
        for (_, tenant), group in self.groups.items():
            for _, _, waiter in group:
                if not waiter.future.done():
                    queued = cost(tenancy, tenant, waiter.tokens, waiter.output_tokens)
                    projected[tenant] = projected.get(tenant, self._lifted(tenant)) + queued
        return projected

    def _lifted(self, tenant: str) -> float:
        """The tenant's counter once active: an idle tenant rises to the least active one's counter."""
        own = self._counters.get(tenant, 0.0)
        if tenant in self._active:
            return own
        others = [self._counters.get(name, 0.0) for name in self._active]
        return max(own, min(others)) if others else own


def cost(tenancy: Tenancy, tenant: str, tokens: int, output: int) -> float:
    """What a request of `tokens`, `output` of them reserved output, adds to its tenant's counter."""
    return ((tokens - output) + tenancy.outputTokenWeight * output) / tenancy.weight_of(tenant)
