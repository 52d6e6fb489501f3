"""Admission by forecast: how much KV a request will really hold, learned from what the model does.

Reserving each request's whole `max_new_tokens` guarantees the engine never retracts, but real
answers stop at EOS long before their limit (clients send 2,048-8,192 and get a few hundred back), so
worst-case reservations admit a fraction of what fits and cut goodput at every load. In `forecast`
admission the gate reserves a sequence's prompt plus a forecast of its output instead:

- the forecast is the `forecastQuantile` (0.95 by default) of the output lengths this model's
  sequences actually produced over the last `WINDOW` completions, capped by the request's own limit;
  until `MIN_SAMPLES` completions are seen the gate reserves the whole limit (worst case);
- live engine signals correct it, as SGLang corrects its own `new_token_ratio`: a tick with the
  engine's token_usage over target, new retractions or stale metrics widens the forecast by half
  (up to the limit, i.e. worst case); healthy ticks narrow it back by 3% towards the learned quantile.

What it keeps: at quantile q about (1 - q) of sequences outgrow their reservation, by how much the
trace says; the estimate's headroom and the free KV above the budget absorb that, and the local loop
cuts concurrency on the first pressure it sees. It is a statistical bound, not a proof: `worstCase`
keeps the hard guarantee for those who need it. `bench/protection` measures both.
"""

from __future__ import annotations

import bisect
import collections
import math

WINDOW = 512  # completions remembered
MIN_SAMPLES = 32  # completions before the forecast is trusted
MAX_WIDEN = 64.0


class OutputForecast:
    def __init__(self) -> None:
        self._recent: collections.deque[int] = collections.deque(maxlen=WINDOW)
        self._sorted: list[int] = []
        self.widen = 1.0  # the correction from live engine signals, >= 1

    @property
    def samples(self) -> int:
        return len(self._recent)

    def observe(self, output_tokens: int) -> None:
        """One finished sequence's output length."""
        if len(self._recent) == self._recent.maxlen:
            oldest = self._recent[0]
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        self._recent.append(output_tokens)
        bisect.insort(self._sorted, output_tokens)

    def tokens(self, quantile: float) -> int | None:
        """The forecast output of one sequence, widened; None while too little is known."""
        if len(self._sorted) < MIN_SAMPLES:
            return None
        index = min(len(self._sorted) - 1, math.ceil(quantile * len(self._sorted)) - 1)
        return max(1, math.ceil(self._sorted[max(0, index)] * self.widen))

    def pressure(self) -> None:
        """The engine is over target, retracting or silent: reserve more."""
        self.widen = min(MAX_WIDEN, self.widen * 1.5)

    def healthy(self) -> None:
        self.widen = max(1.0, self.widen * 0.97)

    def reserve(self, prompt_tokens: int, sequences: int, limit: int, quantile: float) -> int:
        """KV tokens to reserve for a request: its prompts plus each sequence's forecast output."""
        forecast = self.tokens(quantile)
        per_sequence = limit if forecast is None else min(limit, forecast)
        return prompt_tokens + sequences * per_sequence
