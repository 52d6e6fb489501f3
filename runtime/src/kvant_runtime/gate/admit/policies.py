"""The admission policies and the one predicate over them.

A policy is a module with one function, `blocks(check) -> bool`: whether the request in `check` must
wait for it if started now. It reads; it never writes (the grant is `Admission._grant`'s alone).
Each policy knows which admission modes it serves and answers False in the others. Adding one is a
new module and one line in `POLICIES`; its name is the label observe mode reports it under
(`kvant_gate_over_limit_total{limit=...}`).

Pacing policies (`PACING`) hold a request back only for a moment, so that the engine's own queue stays
short and its snapshot current; nothing they hold back fails to fit. A gate without a waiting room
(`maxQueued: 0`) cannot hold a request back, and refusing it would turn a few milliseconds of pacing
into a 429: so it skips them, the engine's own queue takes the request, and the capacity policies
still refuse what does not fit.
"""

from __future__ import annotations

from collections.abc import Callable

from kvant_contracts.limits import Limits
from kvant_contracts.tenancy import Priority
from kvant_runtime.gate.admit import (
    concurrency_limit,
    critical_reserve,
    engine_queue,
    engine_snapshot,
    grant_pace,
    kv_peak,
    token_budget,
)
from kvant_runtime.gate.admit.check import Check
from kvant_runtime.gate.admit.claims import Held
from kvant_runtime.gate.admit.room import Room

Policy = Callable[[Check], bool]

POLICIES: dict[str, Policy] = {
    "concurrency": concurrency_limit.blocks,
    "token_budget": token_budget.blocks,
    "engine_queue": engine_queue.blocks,
    "engine_snapshot": engine_snapshot.blocks,
    "kv_peak": kv_peak.blocks,
    "grant_pace": grant_pace.blocks,
}
PACING = frozenset({"engine_queue", "engine_snapshot", "grant_pace"})


def over(
    tokens: int,
    output_tokens: int,
    *,
    sequences: int,
    priority: Priority,
    held: Held,
    room: Room,
    limits: Limits,
    critical_waiting: bool,
    now: float,
    drain_rate: float | None = None,
) -> tuple[str, ...]:
    """The policies a request would break if it started now, in registration order; () if none."""
    share = critical_reserve.share(priority, limits, held, critical_waiting=critical_waiting)
    check = Check(tokens, output_tokens, sequences, priority, held, room, limits, share, now, drain_rate)
    can_wait = limits.maxQueued > 0
    return tuple(
        name for name, blocks in POLICIES.items() if (can_wait or name not in PACING) and blocks(check)
    )
