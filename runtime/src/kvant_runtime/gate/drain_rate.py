"""How fast the gate's queue drains: tokens released per second while requests wait.

`queue_wait` reads it for the part of a request's wait that is the tokens queued ahead of it
draining. It is an EWMA, measured only while
the queue is not empty (what is released when nobody waits tells the demand, not the drain rate),
and None until first measured, so no estimate is made before then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The drain rate is folded in once this much waiting time has passed, so that one release right after
# another does not read as an enormous rate.
RATE_SAMPLE_SECONDS = 0.5
# The EWMA's time constant: a change in the drain rate shows in full within a few of these.
RATE_TAU_SECONDS = 10.0


@dataclass
class DrainRate:
    """Tokens released per second while requests wait: an EWMA, None until first measured."""

    value: float | None = None
    tokens: int = 0
    seconds: float = 0.0
    since: float | None = None  # counting from here while the queue is not empty

    def count(self, now: float, tokens: int = 0) -> None:
        if self.since is None:
            return  # nobody waits: what is released now tells the demand, not the drain rate
        self.seconds += max(0.0, now - self.since)
        self.since = now
        self.tokens += tokens
        if self.seconds >= RATE_SAMPLE_SECONDS:
            sample = self.tokens / self.seconds
            if self.value is None:
                # A first window with nothing released is no measurement of the rate (a release a
                # second reads as 0 in half of its half-second windows): it would refuse every
                # queued request as never able to start, until the average recovered.
                if self.tokens > 0:
                    self.value = sample
            else:  # weighted by the time the sample covers, as its samples come irregularly
                self.value += (1.0 - math.exp(-self.seconds / RATE_TAU_SECONDS)) * (sample - self.value)
            self.tokens, self.seconds = 0, 0.0

    def estimate(self, now: float) -> float | None:
        """The rate as of `now`: a drain that stalled lowers the rate as time passes."""
        self.count(now)
        return self.value

    def backlog(self, now: float, waiting: bool) -> None:
        """Starts or stops the clock as the queue fills or empties: it runs only while requests wait."""
        if waiting and self.since is None:
            self.since = now
        elif not waiting and self.since is not None:
            self.count(now)
            self.since = None
