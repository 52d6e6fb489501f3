"""Retractions per minute: the rate `maxRetractionsPerMinute` bounds, defined once for the gate's local
loop (one reading a second) and the operator's protection loop (one every intervalSeconds, or Prometheus).

The rate is the growth of the engine's retraction counter (`sglang_metrics.retractions_total`) over
the last `RETRACTION_WINDOW_SECONDS`, per minute:
- the baseline is the newest reading at least a window old, so the growth covers the whole window;
- when the readings are sparser than the window (an operator interval over a minute), the growth is
  averaged down to a minute;
- when there is less than a window of history, the growth so far is the count: it is never
  extrapolated up (one retraction a second after start is 1 per minute, not 60);
- a counter that goes down (the engine restarted) starts a new history.
From Prometheus the same rate is `increase(counter[window])` (`promql_retractions_per_minute`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from kvant_contracts.sglang_metrics import NUM_RETRACTED_REQUESTS_TOTAL, promql_per_pod

RETRACTION_WINDOW_SECONDS = 60.0
_MINUTE = 60.0


@dataclass(frozen=True)
class RetractionReading:
    """What one reading of the counter says."""

    per_minute: float | None  # None until two readings of this counter exist (and after a reset)
    grew: bool  # the counter rose since the previous reading


class RetractionRate:
    """One engine's retraction counter, read over time, as retractions per minute."""

    def __init__(self) -> None:
        self._readings: collections.deque[tuple[float, float]] = collections.deque()

    def observe(self, now: float, total: float) -> RetractionReading:
        """Records the counter's `total` at `now` (seconds, monotonic) and returns the rate."""
        readings = self._readings
        if readings and (total < readings[-1][1] or now < readings[-1][0]):
            readings.clear()  # the engine restarted, and its counter with it
        grew = bool(readings) and total > readings[-1][1]
        readings.append((now, total))
        while len(readings) > 1 and now - readings[1][0] >= RETRACTION_WINDOW_SECONDS:
            readings.popleft()
        if len(readings) < 2:
            return RetractionReading(None, grew)
        since, baseline = readings[0]
        span = max(now - since, RETRACTION_WINDOW_SECONDS)
        return RetractionReading((total - baseline) * _MINUTE / span, grew)


def promql_retractions_per_minute(selector: str, by: str = "pod") -> str:
    """The same rate from Prometheus, per `by`, for series matching `selector` (`{…}`)."""
    window = f"{RETRACTION_WINDOW_SECONDS:g}s"
    growth = f"increase({NUM_RETRACTED_REQUESTS_TOTAL}{selector}[{window}])"
    scale = _MINUTE / RETRACTION_WINDOW_SECONDS
    query = promql_per_pod(NUM_RETRACTED_REQUESTS_TOTAL, growth, by)
    return query if scale == 1.0 else f"({query}) * {scale:g}"
