"""How long the simulated model's answers are, before their `max_new_tokens`.

Real requests stop at EOS long before their limit: clients send `max_tokens` of 2,048 to 8,192 and
get a few hundred tokens back. With `--output-lengths` each request draws its natural length (from
its own seeded generator, so runs repeat) and stops there with `finish_reason: stop`, unless it sets
`ignore_eos`, which SGLang honours. Without it every request runs to its limit, the kindest load for
an admission that reserves the whole limit.

Forms: `lognormal:MEDIAN,SIGMA` (token counts whose log is normal; a common fit to chat answers), or
`file:PATH` (one length per line, drawn uniformly: a trace of real output lengths).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

MAX_LENGTH = 1 << 20


class OutputLengthsError(ValueError):
    pass


@dataclass(frozen=True)
class OutputLengths:
    median: float = 0.0
    sigma: float = 0.0
    trace: tuple[int, ...] = ()

    def draw(self, rng: random.Random) -> int:
        if self.trace:
            return rng.choice(self.trace)
        return max(1, min(MAX_LENGTH, round(self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0)))))


def parse_output_lengths(text: str) -> OutputLengths:
    kind, _, rest = text.partition(":")
    if kind == "lognormal":
        parts = rest.split(",")
        try:
            median, sigma = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
        except ValueError:
            median = sigma = math.nan
        if not (
            math.isfinite(median) and math.isfinite(sigma) and 0 < median <= MAX_LENGTH and 0 <= sigma <= 5
        ):
            raise OutputLengthsError(
                f"--output-lengths {text!r}: expected lognormal:MEDIAN,SIGMA with 0 < MEDIAN <= {MAX_LENGTH} "
                "and 0 <= SIGMA <= 5, e.g. lognormal:300,0.8"
            )
        return OutputLengths(median=median, sigma=sigma)
    if kind == "file":
        try:
            lines = Path(rest).read_text().split()
            trace = tuple(int(line) for line in lines)
        except (OSError, ValueError) as err:
            raise OutputLengthsError(f"--output-lengths {text!r}: cannot read lengths: {err}") from None
        if not trace or not all(0 < n <= MAX_LENGTH for n in trace):
            raise OutputLengthsError(
                f"--output-lengths {text!r}: need one or more lengths in 1..{MAX_LENGTH}"
            )
        return OutputLengths(trace=trace)
    raise OutputLengthsError(f"--output-lengths {text!r}: expected lognormal:MEDIAN,SIGMA or file:PATH")
