"""The condition set of a QuantizedModel and the one way to change it.

Conditions follow kstatus / Argo CD: `Ready`, `Progressing` and `Degraded` are the summary the
tools read, each condition carries `observedGeneration`, and `lastTransitionTime` moves only when
the status flips, so re-applying the same decision is a no-op.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from kvant_operator.api.status import Condition, ConditionStatus


class ConditionType(StrEnum):
    """Every condition a QuantizedModel can carry."""

    CONVERTED = "Converted"  # the artifact exists in the requested weight format
    CALIBRATED = "Calibrated"  # FP8 KV scales are measured (or not needed)
    VALIDATED = "Validated"  # the evaluation gate passed (or none was asked for)
    READY = "Ready"  # serving replicas are ready and the gate admits traffic
    PROGRESSING = "Progressing"  # work towards the current generation is under way
    DEGRADED = "Degraded"  # serving, but below the spec (replicas missing, limits lowered by failure)
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
