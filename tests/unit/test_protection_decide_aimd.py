"""The operator's protection decision: AIMD within [min, ceiling]: retractions on any replica cut, a
full cache alone does not, room on some replica raises."""

from __future__ import annotations

from kvant_operator.protection.decide import Bounds, Sample, decide

BOUNDS = Bounds(floor=4, ceiling=64, target_token_usage=0.9, max_retractions_per_minute=0)


def test_a_full_cache_without_retractions_holds_steady():
    decision = decide(48, [Sample("a", 0.99, 0.0), Sample("b", 0.96, 0.0)], BOUNDS)
    assert decision.concurrency == 48 and not decision.changed_from(48)
    assert "no retractions, token_usage up to 0.99 (target 0.90)" in decision.reason


def test_retractions_on_one_replica_cut_by_a_quarter_and_name_it():
    decision = decide(64, [Sample("a", 0.5, 0.0), Sample("b", 0.96, 3.0)], BOUNDS)
    assert decision.concurrency == 48
    assert "3 retractions/min > 0 on replica b" in decision.reason
    assert "64 → 48" in decision.reason


def test_retractions_over_tolerance_cut_even_below_target():
    decision = decide(40, [Sample("a", 0.7, 12.0)], BOUNDS)
    assert decision.concurrency == 30
    assert "12 retractions/min > 0 on replica a" in decision.reason


def test_cuts_stop_at_the_floor():
    assert decide(5, [Sample("a", 0.99, 9.0)], BOUNDS).concurrency == 4
    assert decide(4, [Sample("a", 0.99, 9.0)], BOUNDS).concurrency == 4


def test_headroom_raises_additively_up_to_the_ceiling():
    assert decide(40, [Sample("a", 0.3, 0.0)], BOUNDS).concurrency == 44  # step = ceiling // 16
    assert decide(62, [Sample("a", 0.3, 0.0)], BOUNDS).concurrency == 64
    assert not decide(64, [Sample("a", 0.3, 0.0)], BOUNDS).changed_from(64)


def test_near_target_holds_steady():
    decision = decide(48, [Sample("a", 0.85, 0.0)], BOUNDS)
    assert decision.concurrency == 48 and not decision.changed_from(48)


def test_a_current_value_outside_new_bounds_is_clamped_first():
    # on-call lowered the ceiling below what protection had published
    assert decide(100, [Sample("a", 0.5, 0.0)], BOUNDS).concurrency == 64
