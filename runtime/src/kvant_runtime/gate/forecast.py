"""Admission by forecast: how much KV the requests in flight will really hold, learned from the model.

Reserving each request's whole `max_new_tokens` guarantees the engine never retracts, but real
answers stop at EOS long before their limit (clients send 2,048-8,192 and get a few hundred back), so
worst-case reservations admit a fraction of what fits and cut goodput at every load. In `forecast`
admission the gate reserves for the requests in flight together, as a statistical multiplexer does:

- each sequence reserves its prompt plus the mean output length this model's sequences produced
  over the last `WINDOW` completions (capped by its own limit), and the budget keeps, on top, a
  margin for the in-flight total: z x stdev x sqrt(n) for n sequences, z the normal quantile of
  `forecastQuantile` (0.95 by default). So the reserved total covers the in-flight answers' total
  with about that probability (the sum of n independent lengths is close to normal). Reserving a
  high quantile per sequence instead would reserve n x q95: on a lognormal(300, 0.8) trace 2.7x the
  mean per sequence, the same worst case at a smaller scale (measured: 39 % of requests turned away
  at the load that fills the cache, bench/protection/trace.py);
- until `MIN_SAMPLES` completions are seen each sequence reserves its whole limit (worst case);
- live engine signals correct it, as SGLang corrects its own `new_token_ratio` after a retraction:
  a tick on which the engine holds more KV than the gate reserved for what it admitted (beyond the
  budget's slack), retracts, or cannot be read widens mean and margin by half (up to the limit, i.e.
  worst case); other ticks narrow it back by 3% towards the learned values. A full cache is no such
  evidence: token usage over target is the concurrency loop's to answer, and widening on it turned a
  well-used cache into worst-case reservations under every burst (bench/protection).

What it keeps: the in-flight total outgrows its reservation with probability about 1 - q; the
estimate's headroom and the engine's own admission (SGLang admits a new sequence only with room for
its whole clipped limit) absorb most of that, the live signals widen on the first excess, and
`bench/protection/trace.py` counts the retractions that remain. It is a statistical bound, not a
proof: `worstCase` keeps the hard guarantee for those who need it.
"""

from __future__ import annotations

import collections
import math
from statistics import NormalDist

WINDOW = 512  # completions remembered
MIN_SAMPLES = 32  # completions before the forecast is trusted
MAX_WIDEN = 64.0
MAX_QUANTILE = 0.9999  # forecastQuantile 1.0 reads as this: a finite margin (z = 3.7)


class OutputForecast:
    def __init__(self) -> None:
        self._recent: collections.deque[int] = collections.deque(maxlen=WINDOW)
        # The output limits of recent requests: the largest caps what the gauges show, since no
        # sequence reserves more than its own limit (a 256-token limit once showed a forecast of 864).
        self._limits: collections.deque[int] = collections.deque(maxlen=WINDOW)
        self._sum = 0
        self._sum_squares = 0
        self.widen = 1.0  # the correction from live engine signals, >= 1

    @property
    def samples(self) -> int:
        return len(self._recent)

    def observe(self, output_tokens: int, limit: int | None = None) -> None:
        """One finished sequence's output length, and the limit it was generated under."""
        if limit is not None:
            self._limits.append(limit)
        if len(self._recent) == self._recent.maxlen:
            oldest = self._recent[0]
            self._sum -= oldest
            self._sum_squares -= oldest * oldest
        self._recent.append(output_tokens)
        self._sum += output_tokens
        self._sum_squares += output_tokens * output_tokens

    def tokens(self) -> int | None:
        """What one sequence reserves for its output (the widened mean); None while too little is known."""
        if len(self._recent) < MIN_SAMPLES:
            return None
        return max(1, math.ceil(self._sum / len(self._recent) * self.widen))

    def margin(self, sequences: int, quantile: float) -> int:
        """Tokens the budget keeps on top of `sequences` in flight, for their total's spread."""
        n = len(self._recent)
        if n < MIN_SAMPLES or sequences <= 0:
            return 0
        z = NormalDist().inv_cdf(min(quantile, MAX_QUANTILE))
        variance = max(0.0, self._sum_squares / n - (self._sum / n) ** 2)
        return max(0, math.ceil(z * math.sqrt(variance * sequences) * self.widen))

    def correct(
        self, *, stale: bool, retracted: bool, held: float | None, reserved: int, slack: float
    ) -> None:
        """One tick of live signals: `held`, the KV tokens the engine holds (None if unknown);
        `reserved`, what the gate reserved for the requests it has in flight; `slack`, the tokens the
        budget leaves unreserved for the prompt estimate's error."""
        if stale or retracted or (held is not None and reserved > 0 and held > reserved + slack):
            self.pressure()
        else:
            self.healthy()

    def pressure(self) -> None:
        """The forecast proved short (the engine holds more than reserved, retracts, or is silent)."""
        self.widen = min(MAX_WIDEN, self.widen * 1.5)

    def healthy(self) -> None:
        self.widen = max(1.0, self.widen * 0.97)

    def shown_tokens(self) -> int:
        """What one sequence reserves, as the gauge shows it: capped by the largest recent limit."""
        forecast = self.tokens() or 0
        return min(forecast, max(self._limits)) if self._limits else forecast

    def reserve(self, prompt_tokens: int, sequences: int, limit: int) -> int:
        """KV tokens one request reserves: its prompts plus each sequence's forecast output."""
        forecast = self.tokens()
        per_sequence = limit if forecast is None else min(limit, forecast)
        return prompt_tokens + sequences * per_sequence
