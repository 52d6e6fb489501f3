"""Whether the simulator keeps the real engine's course on one trace: the bands it is held to.

The engine itself varies from run to run (on the spread trace its retractions went from 3 to 8
between runs of one session), so each band is around the range of the engine's runs, widened:
- token usage, the mean and each quarter of the run's time: within 15 %;
- the largest running batch, the admission rule's most direct result: within 15 %;
- retractions (both must retract): within 15 %; when the first came, as a share of the requests
  finished: within 0.15 of the engine's;
- the time the trace takes and the median request's latency: within 35 % of the engine's mean.

These are issue #39's bands, and the batch's. `bench/protection/real_engine.py` prints the verdict
beside its side by side; bench/README.md, "The simulator beside the real engine", has what it found.
"""

from __future__ import annotations

from typing import Any

BAND = 0.15
ONSET_BAND = 0.15  # of the requests finished
TIME_BAND = 0.35


def _around(ours: float | None, theirs: list[float | None], band: float) -> bool:
    """`ours` within the range of the engine's runs, widened by `band` of it."""
    if ours is None or None in theirs:
        return False
    low, high = min(t for t in theirs if t is not None), max(t for t in theirs if t is not None)
    return low * (1 - band) <= ours <= high * (1 + band)


def compare(real: list[dict[str, Any]], simulated: dict[str, Any]) -> list[str]:
    """What disagrees beyond its band, one line each; empty when the simulator keeps the engine's
    course. `real`: the engine's runs of the same trace (`real_engine.fixed_run`'s reports)."""
    wrong = []

    def check(name: str, ours: float | None, theirs: list[float | None], band: float) -> None:
        if not _around(ours, theirs, band):
            wrong.append(f"{name}: simulator {ours}, engine {theirs}")

    check("mean token usage", simulated["token_usage_mean"], [r["token_usage_mean"] for r in real], BAND)
    for quarter in range(4):
        theirs = [r["token_usage_by_quarter"][quarter] for r in real]
        check(
            f"token usage, quarter {quarter + 1}", simulated["token_usage_by_quarter"][quarter], theirs, BAND
        )
    check(
        "largest running batch",
        simulated["largest_running_batch"],
        [r["largest_running_batch"] for r in real],
        BAND,
    )
    check("retractions", simulated["retractions"] or None, [r["retractions"] or None for r in real], BAND)
    onsets = [r["first_retraction_at_share_done"] for r in real]
    ours = simulated["first_retraction_at_share_done"]
    if ours is None or None in onsets or not min(onsets) - ONSET_BAND <= ours <= max(onsets) + ONSET_BAND:
        wrong.append(f"first retraction, share of the requests done: simulator {ours}, engine {onsets}")
    for key in ("seconds", "latency_median_s"):
        mean = sum(r[key] for r in real) / len(real)
        check(key, simulated[key], [round(mean, 2)], TIME_BAND)
    return wrong
