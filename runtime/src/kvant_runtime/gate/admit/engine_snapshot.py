"""`engine` admission: after a request comes back, wait for the engine's next snapshot.

A `/v1/loads` snapshot published before the gate last got a request back still counts that request's
tokens, which no request in flight holds any more; read by `kv_peak` as someone's progress they would
make a request look closer to its end than it is. So until a newer snapshot comes (SGLang publishes
one on every prefill batch and every 15 decode steps at the latest, and the engine's own queue keeps
its batch fed meanwhile) nothing new is let through.

A pacing policy (`policies.PACING`): it holds a request for a few decode steps, never because
something does not fit, so a gate without a waiting room skips it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvant_runtime.gate.admit.policies import Check


def blocks(check: Check) -> bool:
    if check.limits.admission != "engine" or not check.held.tickets:
        return False
    load = check.room.fresh_engine(check.now)
    return load is not None and load.as_of < check.held.last_release
