"""Per-tenant token rates: a tenant with `tokensPerMinute` has a token bucket a minute's worth deep.

A request over it is refused with 429 and the seconds until it would fit (reason `tenant_rate`,
see admission); a request that is refused or given up later gets its tokens back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvant_contracts.tenancy import Tenancy


@dataclass
class _Bucket:
    level: float
    stamp: float


class RateBuckets:
    """The buckets of the tenants with a token rate, on the admission's clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, tenant: str, tokens: int, per_minute: int | None) -> float | None:
        """Takes `tokens` from the tenant's bucket; None when taken, else the seconds until they fit."""
        if per_minute is None:
            return None
        now = self._clock()
        refill = per_minute / 60.0
        bucket = self._buckets.setdefault(tenant, _Bucket(float(per_minute), now))
        bucket.level = min(float(per_minute), bucket.level + (now - bucket.stamp) * refill)
        bucket.stamp = now
        # A request larger than a minute's worth still runs from a full bucket (it leaves a debt).
        if bucket.level >= min(tokens, per_minute):
            bucket.level -= tokens
            return None
        return (min(tokens, per_minute) - bucket.level) / refill

    def refund(self, tenant: str, tokens: int, per_minute: int | None) -> None:
        bucket = self._buckets.get(tenant)
        if per_minute is not None and bucket is not None:
            bucket.level = min(float(per_minute), bucket.level + tokens)

    def drop_unlimited(self, tenancy: Tenancy) -> None:
        """Forgets the buckets of tenants the new limits give no token rate."""
        for tenant in [name for name in self._buckets if tenancy.tokens_per_minute(name) is None]:
            del self._buckets[tenant]
