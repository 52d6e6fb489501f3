"""Per-tenant token rates: a tenant with `tokensPerMinute` has a token bucket a minute's worth deep.

A request over it is refused with 429 and the seconds until it would fit (reason `tenant_rate`,
see admission); a request that is refused or given up later gets back what it was charged. The
charge remembers its amount and its bucket, because the limits may change while the request
waits: a refund recomputed from the new limits would give back tokens never taken (a rate added
meanwhile) or to a bucket that is not the one charged (a rate removed and added again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvant_contracts.tenancy import Tenancy


@dataclass(eq=False)  # identity: a charge goes back only to the very bucket it came from
class _Bucket:
    level: float
    stamp: float
    depth: float  # a minute's worth at the rate of the last take: the level never exceeds it


@dataclass(frozen=True)
class Charge:
    """What one request took from its tenant's bucket; `bucket` None when the tenant had no rate."""

    tenant: str
    tokens: int
    bucket: _Bucket | None


class RateBuckets:
    """The buckets of the tenants with a token rate, on the admission's clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, tenant: str, tokens: int, per_minute: int | None) -> Charge | float:
        """Takes `tokens` from the tenant's bucket: the charge when taken, else the seconds until they
        fit."""
        if per_minute is None:
            return Charge(tenant, 0, None)
        now = self._clock()
        refill = per_minute / 60.0
        bucket = self._buckets.setdefault(tenant, _Bucket(float(per_minute), now, float(per_minute)))
        bucket.depth = float(per_minute)
        bucket.level = min(bucket.depth, bucket.level + (now - bucket.stamp) * refill)
        bucket.stamp = now
        # A request larger than a minute's worth still runs from a full bucket (it leaves a debt).
        if bucket.level >= min(tokens, per_minute):
            bucket.level -= tokens
            return Charge(tenant, tokens, bucket)
        return (min(tokens, per_minute) - bucket.level) / refill

    def refund(self, charge: Charge) -> None:
        """Gives back what `charge` took, to the bucket it took it from if the tenant still has it."""
        bucket = charge.bucket
        if bucket is not None and self._buckets.get(charge.tenant) is bucket:
            bucket.level = min(bucket.depth, bucket.level + charge.tokens)

    def drop_unlimited(self, tenancy: Tenancy) -> None:
        """Forgets the buckets of tenants the new limits give no token rate."""
        for tenant in [name for name in self._buckets if tenancy.tokens_per_minute(name) is None]:
            del self._buckets[tenant]
