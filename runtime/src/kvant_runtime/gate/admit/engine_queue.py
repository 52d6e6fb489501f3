"""`engine` admission: keep the engine's own waiting queue short but never empty.

SGLang already reserves KV exactly for what it takes from its waiting queue (`PrefillAdder`), so the
gate does not reserve it again: it lets a request through while the engine has fewer than `depth`
waiting, and holds the rest in its own queue, where classes, fair shares and deadlines order them.

What the engine has waiting is read from its `/v1/loads` snapshot, which lags by up to about 15
decode steps; what the gate let through since is not in it yet. So the waiting count is the larger
of the snapshot's and the gate's in-flight requests less the snapshot's running ones: a request the
gate sent counts as waiting until the engine reports it running.

A snapshot that is missing or stale counts as saturated: one request at a time, so traffic never
stops. Why a short queue and no second reservation: see docs/concepts/admission.md
("`engine` admission (the default): no second reservation").
"""

from __future__ import annotations

import math

from kvant_runtime.gate.admit.check import Check
from kvant_runtime.gate.engine_load import EngineLoad

# The engine's waiting queue the gate keeps: at least this many, so the next prefill batch always has
# a request to take; and a quarter of the running batch, so a large batch refills as fast as it drains
# (SGLang takes every waiting request that fits into one prefill batch).
MIN_ENGINE_QUEUE = 2
ENGINE_QUEUE_SHARE = 0.25


def depth(load: EngineLoad) -> int:
    return max(MIN_ENGINE_QUEUE, math.ceil(ENGINE_QUEUE_SHARE * load.running))


def engine_waiting(load: EngineLoad, in_flight: int) -> int:
    """Requests waiting in the engine or on their way to it."""
    return max(load.waiting, in_flight - load.running)


def blocks(check: Check) -> bool:
    if check.limits.admission != "engine":
        return False
    load = check.room.fresh_engine(check.now)
    if load is None:
        return check.held.requests > 0
    return engine_waiting(load, check.held.requests) >= check.share * depth(load)
