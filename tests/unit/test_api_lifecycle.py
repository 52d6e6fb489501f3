"""Conditions change in one place; lastTransitionTime moves only when the status flips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kvant_operator.api.lifecycle import ConditionType, find_condition, is_true, set_condition
from kvant_operator.api.status import ConditionStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_same_status_keeps_transition_time_and_updates_generation():
    first = set_condition(
        [], ConditionType.READY, ConditionStatus.FALSE, reason="Deploying", message="", generation=1, now=T0
    )
    later = T0 + timedelta(minutes=5)
    again = set_condition(
        first,
        ConditionType.READY,
        ConditionStatus.FALSE,
        reason="Waiting",
        message="x",
        generation=2,
        now=later,
    )
    ready = find_condition(again, ConditionType.READY)
    assert ready is not None
    assert (ready.last_transition_time, ready.observed_generation, ready.reason) == (T0, 2, "Waiting")


def test_flip_moves_transition_time_and_keeps_one_entry_per_type():
    later = T0 + timedelta(minutes=5)
    conditions = set_condition(
        [], ConditionType.READY, ConditionStatus.FALSE, reason="A", message="", generation=1, now=T0
    )
    conditions = set_condition(
        conditions,
        ConditionType.CONVERTED,
        ConditionStatus.TRUE,
        reason="B",
        message="",
        generation=1,
        now=T0,
    )
    conditions = set_condition(
        conditions, ConditionType.READY, ConditionStatus.TRUE, reason="C", message="", generation=1, now=later
    )
    assert [c.type for c in conditions] == ["Converted", "Ready"]
    assert is_true(conditions, ConditionType.READY)
    ready = find_condition(conditions, ConditionType.READY)
    assert ready is not None and ready.last_transition_time == later
