"""`engine` admission: after a request comes back, wait for the engine's next snapshot.

A `/v1/loads` snapshot published before the gate last got a request back still counts that request's
tokens, which no request in flight holds any more; read by `kv_peak` as someone's progress they would
make a request look closer to its end than it is. So until a newer snapshot comes (SGLang publishes
one on every prefill batch and every 15 decode steps at the latest, and the engine's own queue keeps
its batch fed meanwhile) nothing new is let through.

Except where the snapshot cannot matter: when every request in flight and this one fit the cache at
their whole output limits (the worst case `kv_peak` bounds from below), less the prompt estimate's
headroom, no reading of anyone's progress can make it overflow. Waiting there cost a light load about
half a snapshot interval of time to first token on every request: on the simulator's GPU profile with
the cache half empty, 80 ms a request, which cost the bench's FP8 1x cell a quarter of its
completions in a 12 s window (bench/README).

A pacing policy (`policies.PACING`): it holds a request for a few decode steps, never because
something does not fit, so a gate without a waiting room skips it.
"""

from __future__ import annotations

from kvant_runtime.gate.admit.check import Check
from kvant_runtime.tokens import ESTIMATE_HEADROOM


def blocks(check: Check) -> bool:
    if check.limits.admission != "engine" or not check.held.tickets:
        return False
    known = check.room.engine  # its capacity does not age
    if known is not None and check.held.tokens + check.tokens <= (1.0 - ESTIMATE_HEADROOM) * known.capacity:
        return False
    load = check.room.fresh_engine(check.now)
    return load is not None and load.as_of < check.held.last_release
