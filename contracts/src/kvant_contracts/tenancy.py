"""Many tenants on one protected cache: who a request is for, how much it matters, and its fair share.

The one home of the tenancy contract, shared by the operator (which renders `Tenancy` into the
limits document as `tenancy`, see kvant_contracts.limits) and the gate (which reads the headers
below and orders its admission queue by class, then fair share, then deadline).

- A request's *tenant* comes from its API key (`tenant=` in the keys file) or, only from a trusted
  source (a gateway's key marked `trusted`, or the admin token), from `TENANT_HEADER`; otherwise it
  is `DEFAULT_TENANT`.
- Its *priority class* is the key's `priority=`, else a trusted `PRIORITY_HEADER`, else the tenant's
  entry in `Tenancy.tenants`, else `Tenancy.defaultPriority`.
- `DEADLINE_HEADER` is the client's remaining time budget in milliseconds, relative to its arrival;
  anyone may send it, since it can only shorten the sender's own wait.
- The class also reaches the engine: the gate writes `ENGINE_PRIORITY[class]` into the request's
  `priority` field, over whatever the client sent, and drops SGLang's own `OVERRIDE_PRIORITY_HEADER`,
  so no client picks its place in the engine's queue either (docs/concepts/tenants.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

Priority = Literal["critical", "standard", "sheddable"]
# Rank order: the first class is served first, the last is refused (and evicted) first.
PRIORITIES: Final[tuple[Priority, ...]] = ("critical", "standard", "sheddable")
DEFAULT_TENANT: Final = "default"
TENANT_HEADER: Final = "X-Kvant-Tenant"
PRIORITY_HEADER: Final = "X-Kvant-Priority"
DEADLINE_HEADER: Final = "X-Kvant-Deadline-Ms"
# SGLang's header that sets a request's priority over its body's `priority` field (0.5.23,
# srt/entrypoints/request_headers.py): the gate never forwards it.
OVERRIDE_PRIORITY_HEADER: Final = "x-override-priority"
# What each class is in the engine's `priority` field. SGLang with --enable-priority-scheduling runs
# larger values first (its default order); without it, it ignores the field. Steps of 1 stay under its
# preemption threshold (--priority-scheduling-preemption-threshold, 10 by default): a class orders the
# engine's waiting queue and never evicts running work, unless a deployment lowers that threshold.
ENGINE_PRIORITY: Final[dict[Priority, int]] = {"critical": 2, "standard": 1, "sheddable": 0}
# Per-tenant metrics carry the top N tenants by admitted tokens; the rest share OTHER_TENANTS, so a
# gateway naming thousands of tenants cannot blow up the scrape.
TOP_TENANTS: Final = 10
OTHER_TENANTS: Final = "other"
# A tenant name: what fits a Prometheus label value, a header and a log line without quoting.
TENANT_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def rank(priority: Priority) -> int:
    """0 for the most important class; lower ranks go first."""
    return PRIORITIES.index(priority)


def valid_tenant_name(name: str) -> bool:
    """Whether `name` may name a tenant (OTHER_TENANTS is the metrics' own bucket, not a tenant)."""
    return bool(TENANT_NAME.match(name)) and name != OTHER_TENANTS


def as_priority(value: str) -> Priority | None:
    """`value` as a priority class (case-insensitive), or None when it names none."""
    lowered = value.strip().lower()
    for priority in PRIORITIES:
        if lowered == priority:
            return priority
    return None


@dataclass(frozen=True)
class Tenant:
    """One tenant named in the limits document. Field names are the CR's."""

    name: str
    priority: Priority = "standard"
    # Its share of the cache against the others in its class: a weight-2 tenant gets twice the tokens.
    weight: float = 1.0
    # At most this many tokens (prompt + reserved output) admitted per minute; None: no rate limit.
    tokensPerMinute: int | None = None


@dataclass(frozen=True)
class Tenancy:
    """How the gate shares one replica between tenants."""

    defaultPriority: Priority = "standard"
    tenants: tuple[Tenant, ...] = ()
    # Output tokens cost more than prompt tokens in the fair-share counter (as in VTC, Sheng et al.,
    # "Fairness in Serving Large Language Models"): decoding them holds the engine far longer.
    outputTokenWeight: float = 2.0
    # The share of maxQueued sheddable work may fill, so a sheddable flood leaves room for the rest.
    sheddableQueueShare: float = 0.5
    # The share of the concurrency and token budget held back from standard and sheddable work while
    # critical work is queued or in flight, so a critical burst finds room without evicting running
    # requests.
    criticalReserve: float = 0.2

    def tenant(self, name: str) -> Tenant | None:
        for tenant in self.tenants:
            if tenant.name == name:
                return tenant
        return None

    def priority_of(self, name: str, explicit: Priority | None = None) -> Priority:
        """The class of a request from tenant `name`: `explicit` (the key's or a trusted header's) when
        given, else the tenant's entry, else `defaultPriority`."""
        if explicit is not None:
            return explicit
        tenant = self.tenant(name)
        return tenant.priority if tenant is not None else self.defaultPriority

    def weight_of(self, name: str) -> float:
        tenant = self.tenant(name)
        return tenant.weight if tenant is not None else 1.0

    def tokens_per_minute(self, name: str) -> int | None:
        tenant = self.tenant(name)
        return tenant.tokensPerMinute if tenant is not None else None
