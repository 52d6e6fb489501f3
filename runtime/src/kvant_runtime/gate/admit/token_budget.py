"""`worstCase` and `forecast` admission: the gate's own reservations must fit the token budget.

Each request reserves its prompt plus, per sequence, its whole output limit (worstCase) or the
forecast of its output (forecast, see `kvant_runtime.gate.forecast`); together with the forecast's
margin for the in-flight total's spread they must fit the engine's capacity less the prompt
estimate's headroom. The first request in flight always fits (oversized ones are refused at the door
or, with runAlone, run alone), and while the capacity is unknown nothing is checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvant_runtime.gate.admit.check import Check

MODES = ("worstCase", "forecast")


def blocks(check: Check) -> bool:
    budget = check.room.token_budget
    if check.limits.admission not in MODES or budget is None or check.held.requests == 0:
        return False
    margin = check.room.margin(check.held.sequences + check.sequences)
    return check.held.tokens + check.tokens + margin > check.share * budget
