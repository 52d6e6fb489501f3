"""Retraction counters become per-minute rates (the contract's, as the gate's); resets and first
sights give no rate."""

from __future__ import annotations

from kvant_operator.protection.samples import CounterMemory


def test_rate_needs_two_samples_and_survives_counter_reset():
    memory = CounterMemory()
    assert memory.rate_per_minute("a", 10, now=100.0) is None
    assert memory.rate_per_minute("a", 16, now=130.0) == 6.0  # 6 in 30 s: not extrapolated to 12
    assert memory.rate_per_minute("a", 2, now=160.0) is None  # engine restarted: counter went down
    assert memory.rate_per_minute("a", 2, now=190.0) == 0.0
