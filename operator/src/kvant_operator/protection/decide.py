"""The protection decision, a pure function: from measured retractions to the next effective concurrency.

AIMD, like the gate's local loop but slower and across replicas: cut by the limits contract's
decreaseFactor (the gate's, `kvant_contracts.limits.ConcurrencyBounds`) when any replica's retractions
exceed the tolerance; raise by a step when no replica retracts and some replica's cache has room
(token usage below `HEADROOM` x targetTokenUsage); hold otherwise. A full cache without retractions
is the goal, not a reason to cut: SGLang decides what fits its own cache, and the gates keep its
waiting queue short (docs/concepts/admission.md). It never leaves [concurrency.min, the spec's
ceiling]. The raise differs from the gate's on purpose: one decision every intervalSeconds climbs in
larger steps than one a second.
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
    retracting = [s for s in samples if (s.retractions_per_minute or 0) > bounds.max_retractions_per_minute]
    if retracting:
        lowered = max(bounds.floor, math.floor(current * bounds.decrease_factor))
        r = max(retracting, key=lambda s: s.retractions_per_minute or 0)
        allowance = bounds.max_retractions_per_minute
        why = f"{r.retractions_per_minute:.0f} retractions/min > {allowance} on replica {r.replica}"
        return Decision(lowered, f"{why}; concurrency {current} → {lowered}")
    least = min(samples, key=lambda s: s.token_usage)
    if least.token_usage < bounds.target_token_usage * HEADROOM and current < bounds.ceiling:
        raised = min(bounds.ceiling, current + max(1, bounds.ceiling // 16))
        return Decision(
            raised,
            f"no retractions and token_usage {least.token_usage:.2f} has headroom on replica "
            f"{least.replica}; concurrency {current} → {raised}",
        )
    worst = max(samples, key=lambda s: s.token_usage)
    return Decision(
        current,
        f"no retractions, token_usage up to {worst.token_usage:.2f} "
        f"(target {bounds.target_token_usage:.2f}); concurrency stays {current}",
    )
