"""Draining before the gate exits (kvant_contracts.drain): it turns not-ready, keeps serving what still
reaches it, and is done once idle and quiet, or at its deadline.

`Traffic` is what the drain watches, counted by the proxy as requests come and go; the engine's
preStop hook polls the drain's status (`drain_status`) to know when the gate has gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from kvant_contracts.drain import DRAINING_FIELD
from kvant_runtime.gate.admission import Admission

log = logging.getLogger("kvant.gate")

# The drain deadline when none is given (`kvant gate --drain-seconds`): the grace in-flight requests
# had before the gate drained.
SHUTDOWN_GRACE_SECONDS = 30.0
_DRAIN_POLL_SECONDS = 0.05


@dataclass
class Traffic:
    """What a drain watches: the requests the proxy holds now, and what arrived when."""

    open: int = 0  # queued, in flight or passed through
    arrived: int = 0
    last_arrival: float = field(default_factory=time.monotonic)
    draining: bool = False


def drain_status(traffic: Traffic, admission: Admission) -> dict[str, bool | int]:
    """Whether the gate drains and what it still holds, for the engine's preStop hook."""
    return {
        DRAINING_FIELD: traffic.draining,
        "open": traffic.open,
        "inFlight": admission.in_flight,
        "queued": admission.queue_length,
    }


async def drain(traffic: Traffic, admission: Admission, seconds: float, quiet: float) -> str:
    """Turns not-ready and keeps serving until idle and quiet, or until `seconds` passed; returns which.

    Readiness answers 503 from now on, so the Service and the router drop this pod; whatever still
    reaches the gate is admitted and served as before. It is done once it holds no request and none
    has arrived for `quiet` seconds (counted from now at the earliest: the pod may have been idle
    before, yet be sent requests until its removal has propagated)."""
    started = time.monotonic()
    arrived = traffic.arrived
    traffic.draining = True
    log.info(
        "event=gate_draining in_flight=%d queued=%d open=%d deadline_seconds=%g quiet_seconds=%g",
        admission.in_flight,
        admission.queue_length,
        traffic.open,
        seconds,
        quiet,
    )
    while True:
        now = time.monotonic()
        if traffic.open == 0 and now - max(started, traffic.last_arrival) >= quiet:
            outcome = "idle"
            break
        if now - started >= seconds:
            outcome = "deadline"
            break
        await asyncio.sleep(_DRAIN_POLL_SECONDS)
    log.info(
        "event=gate_drained outcome=%s seconds=%.1f arrived_while_draining=%d in_flight=%d queued=%d open=%d",
        outcome,
        time.monotonic() - started,
        traffic.arrived - arrived,
        admission.in_flight,
        admission.queue_length,
        traffic.open,
    )
    return outcome
