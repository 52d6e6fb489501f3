"""How long a request queued now will wait before it starts, and whether that is past its deadline.

A queued request waits for two things:
1. the tokens queued ahead of it to drain, `ahead / rate` at the measured drain rate (`drain_rate`);
2. then for room to open for itself: a running request ends, the engine's snapshot catches up. This
   part is learned, not modelled: each request that leaves the queue leaves its *residual*, what it
   waited beyond what drained ahead of it. A request that timed out leaves its timeout less its
   drain part (it waited at least that), so timeouts raise the estimate that let them in.

The estimate is a high quantile (`RESIDUAL_QUANTILE`) of the residuals of the last `WINDOW_SECONDS` in
the request's own class, plus `ahead / rate`; a request whose estimate is over `DEADLINE_SHARE` of its
deadline is refused at arrival. Its own class: a sheddable request's wait includes the
critical ones that overtook it, which a critical request does not wait for. A quantile and not a
mean, because the two mistakes cost a client differently: a request refused at arrival that would
have started in time is one 429 that came in milliseconds, where a request let in that then times
out is a 429 that came after its whole deadline (issue #38 measured every refusal's p99 at the 4 s
deadline while only the drain part was estimated).

Residuals older than the window are forgotten, so an estimate learned under overload cannot go on
refusing a lightly loaded replica: with too few recent samples the second part is 0, the request
queues, and its wait is the next sample.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from kvant_contracts.tenancy import Priority
from kvant_runtime.gate.drain_rate import DrainRate

# Residuals this old no longer count: a few of the drain rate's time constants.
WINDOW_SECONDS = 20.0
# Fewer recent residuals than this and room for the request itself is taken to open at once.
MIN_SAMPLES = 4
# The share of recent requests whose wait beyond the drain part the estimate covers.
RESIDUAL_QUANTILE = 0.9
# The share of its deadline a request's estimated wait may take: the estimate's error is the margin's
# job, as a request let in on an estimate just under its deadline times out about as often as not.
DEADLINE_SHARE = 0.75


@dataclass
class QueueWait:
    """The drain rate and the recent residual waits; `why_late` decides a refusal at arrival."""

    drain: DrainRate = field(default_factory=DrainRate)
    # By class: (when it left the queue, its residual in seconds), oldest first.
    residuals: dict[Priority, deque[tuple[float, float]]] = field(default_factory=dict)

    def drain_seconds(self, now: float, ahead: int, *, hurried: bool) -> float:
        """Seconds for `ahead` tokens to drain at the rate as of `now`: 0 with none ahead, infinite
        when the drain has stalled to 0. Before the rate is first measured: 0, except for a `hurried`
        request (one with its own deadline), for which it is infinite.

        A client that sends its own deadline asks to be refused at once rather than late, and a cold
        gate cannot say how long anything queued behind others will wait. Queued anyway, a burst on a
        cold gate was refused only as each deadline ran out (issue #38: on the real engine at 4x, 45
        refusals in the first seconds each took the whole 4 s deadline). So until the first
        measurement a hurried request queues only where nothing is ahead of it, and that head's wait
        is the first measurement; a request without a deadline of its own queues as before, for
        `queueTimeoutSeconds`."""
        rate = self.drain.estimate(now)
        if ahead == 0:
            return 0.0
        if rate is None:
            return math.inf if hurried else 0.0
        return math.inf if rate <= 0 else ahead / rate

    def left_queue(self, now: float, klass: Priority, drain_seconds: float, waited: float) -> None:
        """A request of `klass` estimated `drain_seconds` of draining ahead of it left the queue after
        `waited` seconds (granted, or timed out: then `waited` is its timeout)."""
        if math.isfinite(drain_seconds):
            self.residuals.setdefault(klass, deque()).append((now, max(0.0, waited - drain_seconds)))

    def residual(self, now: float, klass: Priority) -> float:
        """The `RESIDUAL_QUANTILE` of `klass`'s residuals of the last `WINDOW_SECONDS`; 0 with too few."""
        recent = self.residuals.get(klass, deque())
        while recent and recent[0][0] < now - WINDOW_SECONDS:
            recent.popleft()
        if len(recent) < MIN_SAMPLES:
            return 0.0
        ordered = sorted(seconds for _, seconds in recent)
        return ordered[min(len(ordered) - 1, math.ceil(RESIDUAL_QUANTILE * len(ordered)) - 1)]

    def why_late(self, now: float, klass: Priority, ahead: int, drain: float, timeout: float) -> str | None:
        """Why a request of `klass` with `ahead` tokens queued before it, which take `drain` seconds
        to drain (`drain_seconds`), cannot start within `timeout` seconds (its estimate is over
        `DEADLINE_SHARE` of it); None when it may."""
        if timeout <= 0:
            return "no slot is free now"
        residual = self.residual(now, klass)
        if drain + residual <= DEADLINE_SHARE * timeout:
            return None
        parts = []
        if math.isinf(drain) and self.drain.value is None:
            parts.append(
                f"{ahead} tokens are queued ahead of it and how fast the queue drains is not measured yet"
            )
        elif drain > 0:
            rate = self.drain.value
            parts.append(
                f"{ahead} tokens are queued ahead of it ({drain:.1f}s at the measured drain rate of "
                f"{rate:.0f} tokens/s)"
            )
        if residual > 0:
            parts.append(
                f"{int(RESIDUAL_QUANTILE * 100)}% of the {klass} requests queued in the last "
                f"{WINDOW_SECONDS:g}s waited up to {residual:.1f}s more for room of their own"
            )
        if math.isinf(drain):
            return "; ".join(parts)
        return "; ".join(parts) + (
            f": about {drain + residual:.1f}s, more than the {DEADLINE_SHARE:.0%} of it a wait may take"
        )
