"""What the engine can hold now: the signal every admission policy reads.

The gate's loops write it (`Admission.set_room`), the policies read it, nothing else changes it:
- `concurrency`: the local loop's effective concurrency (AIMD, `kvant_runtime.gate.concurrency`);
- `token_capacity`: the engine's max_total_num_tokens, or the plan's until the engine reports it;
- `margin`: the forecast's allowance for the in-flight answers' spread (forecast admission);
- `engine`: the engine's latest `/v1/loads` snapshot, or None until one was read (engine admission).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvant_runtime.gate.engine_load import EngineLoad
from kvant_runtime.tokens import ESTIMATE_HEADROOM

# A snapshot older than this counts as missing, and missing counts as saturated (engine_queue): the
# reader polls every few tens of milliseconds, so this is tens of failed reads in a row.
ENGINE_LOAD_STALE_SECONDS = 2.0


def no_margin(_sequences: int) -> int:
    return 0


@dataclass(frozen=True)
class Room:
    concurrency: int
    token_capacity: int | None = None
    margin: Callable[[int], int] = no_margin
    engine: EngineLoad | None = None

    @property
    def token_budget(self) -> int | None:
        """The most reserved tokens in flight at once (worstCase and forecast admission), or None while
        the engine's capacity is unknown: the capacity less the prompt estimate's headroom."""
        if self.token_capacity is None:
            return None
        return int((1.0 - ESTIMATE_HEADROOM) * self.token_capacity)

    def fresh_engine(self, now: float) -> EngineLoad | None:
        """The engine's snapshot if it is recent enough to act on, else None (saturated)."""
        load = self.engine
        if load is None or now - load.read_at > ENGINE_LOAD_STALE_SECONDS:
            return None
        return load
