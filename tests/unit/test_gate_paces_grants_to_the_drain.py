"""`engine` admission paces its grants: room that opens at once (a batch that ran in step ended) is
granted at most `HEADROOM` times as fast as the queue drains, so the next batch does not start, and
end, in step again (`admit/grant_pace.py`)."""

from __future__ import annotations

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admit import grant_pace
from kvant_runtime.gate.admit.check import Check
from kvant_runtime.gate.admit.claims import Held, Ticket
from kvant_runtime.gate.admit.room import Room

NOW = 100.0
RATE = 1000.0  # tokens given back a second while requests wait


def _check(held: Held, tokens: int, *, drain_rate: float | None = RATE, admission: str = "engine") -> Check:
    limits = parse_limits({"admission": admission})
    return Check(tokens, 0, 1, "standard", held, Room(concurrency=64), limits, 1.0, NOW, drain_rate)


def _held(*grants: tuple[int, float]) -> Held:
    """In flight: (tokens, seconds ago granted) each."""
    held = Held()
    for tokens, ago in grants:
        held.take(Ticket(tokens, 0.0, granted_at=NOW - ago))
    return held


def test_grants_in_the_last_window_hold_the_next_back_past_headroom_times_the_drain():
    allowed = int(grant_pace.HEADROOM * RATE * grant_pace.WINDOW_SECONDS)  # 1,500 tokens a window
    recent = _held((1000, 0.2), (300, 0.5))
    assert not grant_pace.blocks(_check(recent, allowed - 1300))
    assert grant_pace.blocks(_check(recent, allowed - 1300 + 1))
    # The same grants a window ago no longer count: what is in flight is kv_peak's to judge.
    assert not grant_pace.blocks(_check(_held((1000, 1.5), (300, 1.1)), 1000))


def test_the_pace_holds_nothing_before_a_drain_is_measured_with_nothing_in_flight_or_in_other_modes():
    recent = _held((5000, 0.1))
    assert not grant_pace.blocks(_check(recent, 5000, drain_rate=None))
    assert not grant_pace.blocks(_check(Held(), 5000))
    assert not grant_pace.blocks(_check(recent, 5000, admission="worstCase"))
    assert grant_pace.blocks(_check(recent, 5000))
