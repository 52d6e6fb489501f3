"""What admission tells a request it turns away: the reason (the metric label), the seconds to wait
before retrying (Retry-After), and a message naming the limit and the numbers that hit it.

The decisions are admission's; this module only words them, one function per reason.
"""

from __future__ import annotations

import math

from kvant_contracts.limits import Limits
from kvant_contracts.tenancy import Priority


class Rejected(Exception):
    """Turned away: `reason` is the metric label, `retry_after` the seconds to tell the client."""

    def __init__(self, reason: str, retry_after: int | None, message: str, status: int = 429) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after
        self.status = status


def too_large(worst: int, budget: int) -> Rejected:
    return Rejected(
        "too_large",
        None,
        f"the request may hold {worst} KV tokens, more than this replica's whole budget of "
        f"{budget}; shorten the prompt or lower max_tokens (or set "
        "spec.limits.oversizeRequests: runAlone)",
        status=413,
    )


def over_rate(tenant: str, per_minute: int | None, tokens: int, wait: float) -> Rejected:
    return Rejected(
        "tenant_rate",
        max(1, math.ceil(wait)),
        f"tenant {tenant!r} is over its tokensPerMinute={per_minute}; this request ({tokens} tokens) "
        f"fits in {wait:.1f}s",
    )


def too_late(limits: Limits, timeout: float, why: str) -> Rejected:
    return Rejected(
        "deadline", limits.retryAfterSeconds, f"cannot start within its deadline of {timeout:g}s: {why}"
    )


def sheddable_share_full(limits: Limits, waiting: int) -> Rejected:
    return Rejected(
        "queue_full",
        limits.retryAfterSeconds,
        f"sheddable requests fill their share of the gate's queue ({waiting} "
        f"waiting, sheddableQueueShare={limits.tenancy.sheddableQueueShare:g} of "
        f"maxQueued={limits.maxQueued}), and none of them is of a tenant further over its fair share "
        "than this one's",
    )


def queue_full(limits: Limits, waiting: int) -> Rejected:
    return Rejected(
        "queue_full",
        limits.retryAfterSeconds,
        f"the gate's queue is full ({waiting} waiting, maxQueued={limits.maxQueued}), and no request "
        "in it is of a lower class or of a tenant further over its fair share than this one's",
    )


def evicted(limits: Limits, klass: Priority, victim: Priority, tenant: str) -> Rejected:
    if klass == victim:
        why = f"tenant {tenant!r} is the furthest over its fair share of the {victim} class"
    else:
        why = f"{victim} requests are shed first"
    return Rejected(
        "evicted",
        limits.retryAfterSeconds,
        f"evicted from the gate's full queue by a {klass} request ({why})",
    )


def timed_out(limits: Limits, reason: str, timeout: float, in_flight: int, in_flight_tokens: int) -> Rejected:
    what = "queueTimeoutSeconds" if reason == "queue_timeout" else "the request's deadline"
    return Rejected(
        reason,
        limits.retryAfterSeconds,
        f"no slot within {what}={timeout:g}s (in flight: {in_flight} requests, {in_flight_tokens} tokens)",
    )
