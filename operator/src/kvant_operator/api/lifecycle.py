"""The condition set of a QuantizedModel and the one way to change it.

Conditions follow kstatus and Argo CD. kstatus (Flux, kpt) reads `Reconciling` (the current
generation is not done yet: InProgress) and `Stalled` (it failed: Failed); Argo CD's health check
reads `Degraded`, `Ready` and `Progressing`. `Ready` means the current generation serves; `Serving`
says whether anything serves, so "an older generation still answers while the new one converts" is
visible without calling the object Ready. Each condition carries `observedGeneration`, and
`lastTransitionTime` moves only when the status flips, so re-applying the same decision is a no-op.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from kvant_operator.api.status import Condition, ConditionStatus


class ConditionType(StrEnum):
    """Every condition a QuantizedModel can carry."""

    FETCHED = "Fetched"  # a fetched source (hf://, s3://) is downloaded and verified
    CONVERTED = "Converted"  # the artifact exists in the requested weight format
    CALIBRATED = "Calibrated"  # FP8 KV scales are measured (or not needed)
    KV_SCALES = "KVScales"  # how SGLang gets the FP8 KV scales: calibrated (by which path), unit, checkpoint
    VALIDATED = "Validated"  # the evaluation gate passed (or none was asked for)
    READY = "Ready"  # the current generation's replicas all serve behind the gate
    SERVING = "Serving"  # some generation's replicas serve (the previous one, during a change)
    PROGRESSING = "Progressing"  # work towards the current generation is under way
    RECONCILING = "Reconciling"  # kstatus: the current generation is not done yet, and has not failed
    DEGRADED = "Degraded"  # serving, but below the spec (replicas missing, limits lowered by failure)
    STALLED = "Stalled"  # kstatus: the current generation failed; it waits for a fix (or a retry)
    CACHE_PROTECTED = "CacheProtected"  # protection holds KV usage below the target


def find_condition(conditions: list[Condition], type_: ConditionType) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: list[Condition], type_: ConditionType) -> bool:
    found = find_condition(conditions, type_)
    return found is not None and found.status is ConditionStatus.TRUE


def set_condition(
    conditions: list[Condition],
    type_: ConditionType,
    status: ConditionStatus,
    *,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> list[Condition]:
    """Returns the conditions with `type_` set; keeps lastTransitionTime unless the status changes."""
    previous = find_condition(conditions, type_)
    since = previous.last_transition_time if previous is not None and previous.status is status else now
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    others = [c for c in conditions if c.type != type_]
    return sorted([*others, updated], key=_condition_order)


def _condition_order(condition: Condition) -> int:
    order = list(ConditionType)
    return order.index(ConditionType(condition.type)) if condition.type in order else len(order)
