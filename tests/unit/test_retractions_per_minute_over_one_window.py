"""Retractions per minute, as the gate and protection both compute it: the counter's growth over the
last window, never extrapolated up from a short history, averaged down over sparse readings."""

from __future__ import annotations

from kvant_contracts.retraction_rate import (
    RETRACTION_WINDOW_SECONDS,
    RetractionRate,
    promql_retractions_per_minute,
)


def test_one_reading_a_second_counts_the_last_minute() -> None:
    rate = RetractionRate()
    first = rate.observe(0.0, 10.0)
    assert (first.per_minute, first.grew) == (None, False)
    assert rate.observe(1.0, 12.0).per_minute == 2.0  # 2 in the first second: 2, not 120
    for second in range(2, 61):
        reading = rate.observe(float(second), 12.0)
    assert reading.per_minute == 2.0 and not reading.grew
    assert rate.observe(62.0, 12.0).per_minute == 0.0  # the two have left the window


def test_sparse_readings_are_averaged_down_to_a_minute() -> None:
    rate = RetractionRate()
    rate.observe(0.0, 0.0)
    assert rate.observe(300.0, 10.0).per_minute == 2.0  # 10 in 5 minutes
    assert rate.observe(600.0, 10.0).per_minute == 0.0  # the baseline is the 300 s reading


def test_a_counter_that_goes_down_starts_a_new_history() -> None:
    rate = RetractionRate()
    rate.observe(0.0, 10.0)
    assert rate.observe(15.0, 16.0).per_minute == 6.0
    restarted = rate.observe(30.0, 2.0)
    assert (restarted.per_minute, restarted.grew) == (None, False)
    assert rate.observe(45.0, 3.0).per_minute == 1.0


def test_prometheus_reads_the_same_window() -> None:
    query = promql_retractions_per_minute('{pod=~"m-.*"}')
    assert f"[{RETRACTION_WINDOW_SECONDS:g}s]" in query
    assert query.startswith("sum by (pod) (max by (pod, dp_rank) (increase(")
