"""`engine` admission: grant at most a little faster than requests come back, so a batch that ends
together does not refill together.

Requests of one shape that start together end together. When such a batch ends, the room for all of
it opens at once; granted at once, the next batch again starts together, and the cache swings between
nearly empty and full every batch (issue #38: on the real engine under overload, about 14 requests
running in step and the cache a little over half full on average). Spread
over time, their endings spread too, each ending makes room for one newcomer, and `kv_peak` lets more
run at once, because requests at different ages never all hold their most at the same moment.

So a request waits while the tokens granted in the last `WINDOW_SECONDS`, with its own, exceed
`HEADROOM` times what the queue drains in that time (`drain_rate`: tokens given back a second while
requests wait). Above 1, the pace never holds the batch below what comes back: it binds only on a
burst of room. Until the drain rate is measured, or while nothing is in flight, it holds nothing.

A pacing policy (`policies.PACING`): it delays a request by at most a window, never because it does
not fit, so a gate without a waiting room skips it.
"""

from __future__ import annotations

from kvant_runtime.gate.admit.check import Check

# Grants this recent count against the pace: short against a request's life (seconds) so the spread
# holds within a batch, long against the gate's polling (tens of milliseconds).
WINDOW_SECONDS = 1.0
# How much faster than the drain grants may come: room to grow the batch after a lull.
HEADROOM = 2.0


def blocks(check: Check) -> bool:
    if check.limits.admission != "engine" or check.drain_rate is None or not check.held.tickets:
        return False
    since = check.now - WINDOW_SECONDS
    recent = sum(t.tokens for t in check.held.tickets if t.granted_at > since)
    return recent + check.tokens > HEADROOM * check.drain_rate * WINDOW_SECONDS
