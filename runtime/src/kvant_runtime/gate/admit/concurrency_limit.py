"""Every admission mode: at most the effective concurrency (the local loop's AIMD value) in flight,
less the critical reserve for other classes."""

from __future__ import annotations

from kvant_runtime.gate.admit.check import Check


def blocks(check: Check) -> bool:
    return check.held.requests >= check.share * check.room.concurrency
