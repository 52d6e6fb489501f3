"""Whom a full queue gives up, lowest class first.

Sheddable requests fill at most `sheddableQueueShare` of maxQueued. An arrival that finds the queue
(or sheddable work its share) full evicts a queued request and takes its place, or is refused:
- from the lowest class with any queued at or below the arrival's (never a higher class), the newest
  request of the tenant furthest over its fair share (its counter as it would be were everything it
  has queued admitted);
- in a lower class that request always goes; in the arrival's own class only when its tenant would
  still be further over than the arrival's tenant with the arrival. So a tenant sending more than its
  share cannot hold the queue against one sending less, and two level tenants do not evict each
  other's requests back and forth.
Running requests are never evicted: that would throw away the KV cache they have computed.
"""

from __future__ import annotations

from kvant_contracts.limits import Limits
from kvant_contracts.tenancy import PRIORITIES, rank
from kvant_runtime.gate.admit.claims import Waiter
from kvant_runtime.gate.admit.fair_share import cost
from kvant_runtime.gate.admit.waiting_room import WaitingRoom
from kvant_runtime.gate.refusals import Rejected, queue_full, sheddable_share_full


def make_room(room: WaitingRoom, limits: Limits, arrival: Waiter) -> Waiter | None:
    """The queued request to evict for `arrival` (None: there is room without evicting); raises
    Rejected when the arrival is refused instead."""
    if arrival.priority == "sheddable":
        share = int(limits.tenancy.sheddableQueueShare * limits.maxQueued)
        if room.waiters["sheddable"] >= share:
            return victim(room, limits, arrival) or _raise(
                sheddable_share_full(limits, room.waiters["sheddable"])
            )
    if len(room) >= limits.maxQueued:
        return victim(room, limits, arrival) or _raise(queue_full(limits, len(room)))
    return None


def victim(room: WaitingRoom, limits: Limits, arrival: Waiter) -> Waiter | None:
    """The queued request the queue gives up for `arrival`, or None when the arrival is refused."""
    tenancy = limits.tenancy
    for lower in reversed(PRIORITIES):
        if rank(lower) < rank(arrival.priority):
            return None
        queued = {
            tenant: [entry[2] for entry in group if not entry[2].future.done()]
            for (priority, tenant), group in room.groups.items()
            if priority == lower
        }
        queued = {tenant: waiters for tenant, waiters in queued.items() if waiters}
        if not queued:
            continue
        projected = room.share.projected(
            tenancy, ((w.tenant, w.tokens, w.output_tokens) for w in room if not w.future.done())
        )
        furthest = max(queued, key=lambda tenant: projected[tenant])
        if lower == arrival.priority:
            mine = projected.get(arrival.tenant, room.share.lifted(arrival.tenant)) + cost(
                tenancy, arrival.tenant, arrival.tokens, arrival.output_tokens
            )
            if projected[furthest] <= mine:
                return None
        return max(queued[furthest], key=lambda waiter: waiter.arrival)
    return None


def _raise(rejected: Rejected) -> Waiter:
    raise rejected
