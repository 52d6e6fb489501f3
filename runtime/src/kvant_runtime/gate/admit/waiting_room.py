"""The gate's queue and its order: who of the waiting requests goes next.

Queued requests are kept by (class, tenant), each group a heap by (deadline, arrival). The next to go
is the one with the smallest key (class rank, its tenant's fair-share counter, deadline, arrival):
critical before standard before sheddable; within a class the tenant furthest below its fair share
(`fair_share`); then the earliest deadline, then the earliest arrival. An arrival is ordered with the
same key, its tenant's counter lifted as `FairShare.enter` would lift it (`would_lead`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from kvant_contracts.tenancy import PRIORITIES, Priority, Tenancy, rank
from kvant_runtime.gate.admit.claims import Waiter
from kvant_runtime.gate.admit.fair_share import FairShare

Key = tuple[int, float, float, int]


class WaitingRoom:
    def __init__(self, share: FairShare) -> None:
        self.share = share
        self.groups: dict[tuple[Priority, str], list[tuple[float, int, Waiter]]] = {}
        self.waiters: dict[Priority, int] = dict.fromkeys(PRIORITIES, 0)
        self.tokens: dict[Priority, int] = dict.fromkeys(PRIORITIES, 0)

    def __len__(self) -> int:
        return sum(self.waiters.values())

    def __iter__(self) -> Iterator[Waiter]:
        return (entry[2] for group in self.groups.values() for entry in group)

    def key(self, waiter: Waiter, counter: float | None = None) -> Key:
        own = self.share.counter(waiter.tenant) if counter is None else counter
        return (rank(waiter.priority), own, waiter.deadline, waiter.arrival)

    def head(self) -> Waiter | None:
        tops = (group[0][2] for group in self.groups.values())
        return min(tops, key=self.key, default=None)

    def would_lead(self, arrival: Waiter) -> bool:
        """Whether an arrival would go next, its tenant's counter lifted as on entering."""
        head = self.head()
        return head is None or self.key(arrival, self.share.lifted(arrival.tenant)) < self.key(head)

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
        waiters = list(self)
        self.groups = {}
        self.waiters = dict.fromkeys(PRIORITIES, 0)
        self.tokens = dict.fromkeys(PRIORITIES, 0)
        for waiter in waiters:
            waiter.priority = tenancy.priority_of(waiter.tenant, waiter.explicit)
            self.push(waiter)

    def tokens_at_or_above(self, klass: Priority) -> int:
        """Tokens queued in `klass` and the classes that go before it."""
        return sum(self.tokens[p] for p in PRIORITIES if rank(p) <= rank(klass))

    def by_tenant(self) -> dict[tuple[str, Priority], int]:
        return {(tenant, priority): len(group) for (priority, tenant), group in self.groups.items()}
