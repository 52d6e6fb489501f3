"""Fair share among tenants: a virtual token counter per tenant (VTC, Sheng et al., "Fairness in
Serving Large Language Models", OSDI '24).

A tenant's counter grows by (prompt + outputTokenWeight x reserved output) / weight as its requests are
admitted; among queued tenants of one class, the smallest counter goes next (`waiting_room`). A tenant
that becomes active again (nothing queued or in flight before) is lifted to the smallest counter of
the active ones, so idling earns no credit; when nothing at all is active, every counter is cleared.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvant_contracts.tenancy import Tenancy

# Counters kept for tenants with nothing queued or in flight, at most; past it they are dropped (a
# tenant back later is lifted to the active ones anyway).
MAX_IDLE_COUNTERS = 4096


def cost(tenancy: Tenancy, tenant: str, tokens: int, output: int) -> float:
    """What a request of `tokens`, `output` of them reserved output, adds to its tenant's counter."""
    return ((tokens - output) + tenancy.outputTokenWeight * output) / tenancy.weight_of(tenant)


class FairShare:
    def __init__(self) -> None:
        self._counters: dict[str, float] = {}
        self._active: dict[str, int] = {}  # per tenant with any: requests queued plus in flight

    def counter(self, tenant: str) -> float:
        return self._counters.get(tenant, 0.0)

    def enter(self, tenant: str) -> None:
        """One more request of the tenant's queued or in flight."""
        if tenant not in self._active:
            self._counters[tenant] = self.lifted(tenant)
        self._active[tenant] = self._active.get(tenant, 0) + 1

    def leave(self, tenant: str) -> None:
        """One request of the tenant's fewer queued or in flight."""
        left = self._active.get(tenant, 0) - 1
        if left > 0:
            self._active[tenant] = left
            return
        self._active.pop(tenant, None)
        if not self._active:
            # Idle: nobody waits and nothing runs, so no share is owed; everyone starts level.
            self._counters.clear()
        elif len(self._counters) > len(self._active) + MAX_IDLE_COUNTERS:
            self._counters = {name: self._counters.get(name, 0.0) for name in self._active}

    def charge(self, tenancy: Tenancy, tenant: str, tokens: int, output: int) -> None:
        """Counts an admitted request of `tokens`, `output` of them reserved output, to its tenant."""
        self._counters[tenant] = self._counters.get(tenant, 0.0) + cost(tenancy, tenant, tokens, output)

    def lifted(self, tenant: str) -> float:
        """The tenant's counter once active: an idle tenant rises to the least active one's counter."""
        own = self._counters.get(tenant, 0.0)
        if tenant in self._active:
            return own
        others = [self._counters.get(name, 0.0) for name in self._active]
        return max(own, min(others)) if others else own

    def projected(self, tenancy: Tenancy, queued: Iterable[tuple[str, int, int]]) -> dict[str, float]:
        """Each tenant's counter (lifted, if it is not active) were its queued requests, given as
        (tenant, tokens, output), all admitted."""
        projected: dict[str, float] = {}
        for tenant, tokens, output in queued:
            projected[tenant] = projected.get(tenant, self.lifted(tenant)) + cost(
                tenancy, tenant, tokens, output
            )
        return projected
