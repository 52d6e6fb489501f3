"""The one backoff rule (kvant_contracts.backoff) and the loops that follow it."""

from __future__ import annotations

from datetime import timedelta

from kvant_contracts import backoff
from kvant_operator.reconcile.artifact_step import backoff as job_backoff


def test_each_retry_in_a_row_doubles_the_wait_up_to_the_ceiling() -> None:
    waits = [backoff.delay(attempt, 0.5, 30.0) for attempt in range(1, 10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert backoff.delay(4, 2.0) == 16.0  # no ceiling


def test_jitter_stays_within_its_spread() -> None:
    spread = [backoff.jittered(10.0) for _ in range(200)]
    assert all(8.0 <= wait <= 12.0 for wait in spread)
    assert len(set(spread)) > 100  # it does spread


def test_a_failed_jobs_retry_waits_as_before() -> None:
    """The operator's Job retries: 10 s, doubling, at most 10 minutes (the numbers before the helper)."""
    assert [job_backoff(a) for a in (1, 2, 3, 7, 8)] == [timedelta(seconds=s) for s in (10, 20, 40, 600, 600)]
