"""The critical reserve: while a critical request waits or runs, other classes may fill only
(1 - criticalReserve) of the room, so a burst of critical work finds it free."""

from __future__ import annotations

from kvant_contracts.limits import Limits
from kvant_contracts.tenancy import Priority
from kvant_runtime.gate.admit.claims import Held


def share(priority: Priority, limits: Limits, held: Held, *, critical_waiting: bool) -> float:
    if priority != "critical" and (held.critical or critical_waiting):
        return 1.0 - limits.tenancy.criticalReserve
    return 1.0
