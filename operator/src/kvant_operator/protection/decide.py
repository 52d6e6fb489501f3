"""The protection decision, a pure function: from measured KV pressure to the next effective concurrency.

AIMD, like the gate's local loop but slower and across replicas: cut by the limits contract's
decreaseFactor (the gate's, `kvant_contracts.limits.ConcurrencyBounds`) when the worst replica's KV
usage passes the target or retractions exceed the tolerance; raise by a step when every replica has
headroom; hold otherwise. It never leaves [concurrency.min, the spec's ceiling]. The raise differs
from the gate's on purpose: one decision every intervalSeconds climbs in larger steps than one a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvant_contracts.limits import ConcurrencyBounds

HEADROOM = 0.8  # raise only below 80% of the target, so the loop does not oscillate around it


@dataclass(frozen=True)
class Sample:
    """One replica's engine metrics at one instant."""

    replica: str
    token_usage: float
    retractions_per_minute: float | None  # None until two samples of the counter exist


@dataclass(frozen=True)
class Bounds:
    floor: int
    ceiling: int
    target_token_usage: float
    max_retractions_per_minute: int
    decrease_factor: float = ConcurrencyBounds().decreaseFactor


@dataclass(frozen=True)
class Decision:
    concurrency: int
    reason: str  # for a person: what was measured and what follows

    def changed_from(self, current: int) -> bool:
        return self.concurrency != current


def decide(current: int, samples: list[Sample], bounds: Bounds) -> Decision:
    current = max(bounds.floor, min(bounds.ceiling, current))
    worst = max(samples, key=lambda s: s.token_usage)
    retracting = [s for s in samples if (s.retractions_per_minute or 0) > bounds.max_retractions_per_minute]
    if worst.token_usage > bounds.target_token_usage or retracting:
        lowered = max(bounds.floor, math.floor(current * bounds.decrease_factor))
        if retracting:
            r = max(retracting, key=lambda s: s.retractions_per_minute or 0)
            why = (
                f"{r.retractions_per_minute:.0f} retractions/min > {bounds.max_retractions_per_minute} "
                f"on replica {r.replica}"
            )
        else:
            target = bounds.target_token_usage
            why = f"token_usage {worst.token_usage:.2f} > {target:.2f} on replica {worst.replica}"
        return Decision(lowered, f"{why}; concurrency {current} → {lowered}")
    if worst.token_usage < bounds.target_token_usage * HEADROOM and current < bounds.ceiling:
        raised = min(bounds.ceiling, current + max(1, bounds.ceiling // 16))
        return Decision(
            raised,
            f"token_usage {worst.token_usage:.2f} has headroom on every replica; "
            f"concurrency {current} → {raised}",
        )
    return Decision(
        current,
        f"token_usage {worst.token_usage:.2f} within target {bounds.target_token_usage:.2f}; "
        f"concurrency stays {current}",
    )
