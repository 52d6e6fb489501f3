"""The open-loop load generator: the same schedule for every front of a cell, bounded, and a request
judged good only when it answered in full within both halves of the SLO."""

from __future__ import annotations

from kvant_dev.open_loop import MAX_REQUESTS, OpenLoopResult, OpenLoopShape, Outcome, Slo

SHAPE = OpenLoopShape(rate=10.0, seconds=30.0, new_tokens=5, texts=("a",), slo=Slo(2.0, 0.1), seed=3)


def test_the_schedule_depends_only_on_rate_window_and_seed_and_is_bounded():
    times = SHAPE.schedule()
    assert (
        times == SHAPE.schedule()
        and times != OpenLoopShape(10.0, 30.0, 5, ("a",), SHAPE.slo, seed=4).schedule()
    )
    assert 200 < len(times) < 400 and times == sorted(times) and times[-1] < 30.0
    assert len(OpenLoopShape(1e6, 60.0, 5, ("a",), SHAPE.slo).schedule()) == MAX_REQUESTS


def test_good_means_200_every_token_and_both_slo_halves():
    result = OpenLoopResult(SHAPE)
    good = Outcome(200, sent_at=0.0, first_at=1.0, answered_at=1.4, tokens=5)
    late_first = Outcome(200, sent_at=0.0, first_at=2.5, answered_at=2.9, tokens=5)
    slow_decode = Outcome(200, sent_at=0.0, first_at=1.0, answered_at=2.0, tokens=5)  # 0.25 s a token
    cut_short = Outcome(200, sent_at=0.0, first_at=1.0, answered_at=1.2, tokens=3)
    refused = Outcome(429, sent_at=0.0, answered_at=0.01)
    result.outcomes = [good, late_first, slow_decode, cut_short, refused]
    assert [result.is_good(o) for o in result.outcomes] == [True, False, False, False, False]
    assert result.good_tokens == 5 and result.goodput == 5 / 30.0
    assert result.completed_tokens == 15
    assert result.summary()["refusal_p99_ms"] == 10.0
