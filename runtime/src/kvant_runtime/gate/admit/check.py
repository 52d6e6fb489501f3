"""What a policy reads: a request that could start now, and the state of the room it would start in.
Its own module, below the policies and their registry (`policies`), which both read it."""

from __future__ import annotations

from dataclasses import dataclass

from kvant_contracts.limits import Limits
from kvant_contracts.tenancy import Priority
from kvant_runtime.gate.admit.claims import Held
from kvant_runtime.gate.admit.room import Room


@dataclass(frozen=True)
class Check:
    """A request that could start now, and everything a policy may read to say whether it may."""

    tokens: int  # what it reserves
    output_tokens: int  # of `tokens`, its output limit (the rest is prompt)
    sequences: int
    priority: Priority  # the class in force
    held: Held
    room: Room
    limits: Limits
    share: float  # the part of the room its class may fill (critical_reserve)
    now: float  # on the admission's clock
    drain_rate: float | None = None  # tokens given back a second while requests wait (drain_rate)
