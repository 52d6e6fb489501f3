"""The local fast loop's rule for the effective concurrency: AIMD on the engine's own signals.

Each tick gets one engine sample (or None when `/metrics` failed or lacked token_usage).
- Saturated: the sample is missing (stale metrics count as saturated), token_usage is above
  targetTokenUsage, or retractions per minute (`kvant_contracts.retraction_rate`, the operator's
  rate too) exceed maxRetractionsPerMinute and grew since the previous tick. The limit drops to
  floor(limit * decreaseFactor).
  A cut acts only as in-flight requests finish, and the cache stays full until then; so
  while in-flight requests still exceed the limit, a fresh sample does not cut again.
  Stale samples always cut: there is no signal to wait for.
- Healthy (token_usage at or below target, no new retractions): the limit grows by increaseStep.
The limit always stays within [concurrency floor, ceiling] of the current limits
(ceiling = min(concurrency.max, maxConcurrency)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvant_contracts.limits import Limits
from kvant_contracts.retraction_rate import RetractionRate


@dataclass(frozen=True)
class EngineSample:
    """What the loop reads from one scrape of the engine's `/metrics`."""

    token_usage: float  # 0..1, the most loaded rank
    retracted_total: float  # the engine's retractions so far (sglang_metrics.retractions_total)
    max_total_num_tokens: int | None  # None when the engine does not export it


@dataclass(frozen=True)
class Change:
    """One move of the effective concurrency, with the reason an operator can read."""

    old: int
    new: int
    direction: str  # "down" | "up"
    signal: str  # metric label: stale_metrics | token_usage | retractions | healthy
    reason: str  # for logs and events, e.g. "token_usage 0.96 > 0.90; concurrency 64 → 48"


class ConcurrencyController:
    """Holds the effective concurrency and moves it one AIMD step per tick."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.value = limits.concurrency_ceiling
        self._retractions = RetractionRate()

    def set_limits(self, limits: Limits) -> Change | None:
        """Applies new limits; clamps the value into the new bounds at once."""
        self.limits = limits
        clamped = max(limits.concurrency_floor, min(self.value, limits.concurrency_ceiling))
        if clamped == self.value:
            return None
        direction = "down" if clamped < self.value else "up"
        return self._move(clamped, direction, "limits", "new limits file")

    def step(self, sample: EngineSample | None, now: float, in_flight: int) -> Change | None:
        """One tick: `now` is a monotonic time, `in_flight` the gate's in-flight requests."""
        if sample is None:
            return self._decrease("stale_metrics", "engine metrics are stale or failing")
        retractions = self._retractions.observe(now, sample.retracted_total)
        grew, per_minute = retractions.grew, retractions.per_minute or 0.0
        target, allowance = self.limits.targetTokenUsage, self.limits.maxRetractionsPerMinute
        if in_flight <= self.value:
            if sample.token_usage > target:
                return self._decrease("token_usage", f"token_usage {sample.token_usage:.2f} > {target:.2f}")
            if grew and per_minute > allowance:
                return self._decrease(
                    "retractions", f"{per_minute:g} retractions/min > maxRetractionsPerMinute {allowance}"
                )
        # Retractions within the allowance do not cut, but they are no sign of room either.
        if sample.token_usage <= target and not grew:
            return self._increase()
        return None

    def _decrease(self, signal: str, why: str) -> Change | None:
        new = max(
            self.limits.concurrency_floor, math.floor(self.value * self.limits.concurrency.decreaseFactor)
        )
        return self._move(new, "down", signal, why)

    def _increase(self) -> Change | None:
        new = min(self.limits.concurrency_ceiling, self.value + self.limits.concurrency.increaseStep)
        return self._move(new, "up", "healthy", "engine healthy")

    def _move(self, new: int, direction: str, signal: str, why: str) -> Change | None:
        if new == self.value:
            return None
        change = Change(self.value, new, direction, signal, f"{why}; concurrency {self.value} → {new}")
        self.value = new
        return change
