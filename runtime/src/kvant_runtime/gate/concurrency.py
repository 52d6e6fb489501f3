"""The local fast loop's rule for the effective concurrency: AIMD on the engine's retractions.

Each tick gets one engine sample (or None when `/metrics` failed or lacked token_usage).
- Retracting: the engine's retractions per minute (`kvant_contracts.retraction_rate`, the operator's
  rate too) exceed maxRetractionsPerMinute and grew since the previous tick. The limit drops to
  floor(decreaseFactor x the requests in flight, or the limit if lower): the concurrency that
  retracted, not a ceiling the gate never reached. That level is remembered.
- Stale: the sample is missing (stale metrics count as saturated): the limit drops by the factor.
  A cut acts only as in-flight requests finish, and the cache stays full until then; so while
  in-flight requests still exceed the limit, a fresh sample does not cut again. Stale samples
  always cut: there is no signal to wait for.
- Clean (no new retraction): the limit grows by increaseStep a tick, but within `NEAR_SHARE` of the
  level that last retracted by one step per `NEAR_SECONDS` only, so the loop probes the edge that
  cost a retraction slowly instead of every few seconds; after `FORGET_SECONDS` without a
  retraction the level is forgotten (the traffic has changed).
A full cache is not a reason to narrow: SGLang itself decides what fits its cache (the gate keeps its
waiting queue short, `admit.engine_queue`), and a full cache without retractions is the goal.
`targetTokenUsage` no longer moves this limit (docs/concepts/admission.md).
The limit always stays within [concurrency floor, ceiling] of the current limits
(ceiling = min(concurrency.max, maxConcurrency)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvant_contracts.limits import Limits, ProtectionMode
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


NEAR_SHARE = 0.9
NEAR_SECONDS = 30.0
FORGET_SECONDS = 300.0


class ConcurrencyController:
    """Holds the effective concurrency and moves it one AIMD step per tick."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.value = limits.concurrency_ceiling
        self._retractions = RetractionRate()
        self._retracted_at: tuple[int, float] | None = None  # (the in-flight level, when)
        self._last_near_step = -math.inf

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
        if self.limits.mode == ProtectionMode.OFF:
            return self._unprotected(sample, now)
        if sample is None:
            return self._decrease(self.value, "stale_metrics", "engine metrics are stale or failing")
        retractions = self._retractions.observe(now, sample.retracted_total)
        grew, per_minute = retractions.grew, retractions.per_minute or 0.0
        allowance = self.limits.maxRetractionsPerMinute
        if grew and per_minute > allowance:
            if in_flight > self.value:  # the last cut has not acted yet
                return None
            level = min(self.value, in_flight) if in_flight > 0 else self.value
            self._retracted_at = (level, now)
            return self._decrease(
                level, "retractions", f"{per_minute:g} retractions/min > maxRetractionsPerMinute {allowance}"
            )
        # Retractions within the allowance do not cut, but they are no sign of room either.
        if not grew:
            return self._increase(now)
        return None

    def _unprotected(self, sample: EngineSample | None, now: float) -> Change | None:
        """Mode `off` enforces nothing, so a cut would only wait to mislead a later `enforce`: an
        unprotected engine retracts at levels a protected one never reaches. (An e2e run switched to
        enforce 3 s after such a cut, and spent its window at 2-3 requests, probing the remembered
        level one step per NEAR_SECONDS.) The limit stays at the ceiling and nothing is remembered;
        the retraction counter is still read, so the first protected tick counts only new ones."""
        if sample is not None:
            self._retractions.observe(now, sample.retracted_total)
        self._retracted_at = None
        return self._move(self.limits.concurrency_ceiling, "up", "limits", "mode off enforces nothing")

    def _decrease(self, level: int, signal: str, why: str) -> Change | None:
        new = max(self.limits.concurrency_floor, math.floor(level * self.limits.concurrency.decreaseFactor))
        return self._move(new, "down", signal, why)

    def _increase(self, now: float) -> Change | None:
        new = min(self.limits.concurrency_ceiling, self.value + self.limits.concurrency.increaseStep)
        if self._retracted_at is not None:
            level, when = self._retracted_at
            if now - when > FORGET_SECONDS:
                self._retracted_at = None
            elif new > NEAR_SHARE * level:
                if now - max(when, self._last_near_step) < NEAR_SECONDS:
                    return None
                self._last_near_step = now
        return self._move(new, "up", "healthy", "engine healthy")

    def _move(self, new: int, direction: str, signal: str, why: str) -> Change | None:
        if new == self.value:
            return None
        change = Change(self.value, new, direction, signal, f"{why}; concurrency {self.value} → {new}")
        self.value = new
        return change
