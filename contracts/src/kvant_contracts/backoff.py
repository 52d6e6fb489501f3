"""Exponential backoff, the one rule every retry loop of Kvant's follows: the n-th retry in a row waits
`first` x 2^(n-1) seconds, at most `ceiling`; `jittered` spreads a wait so that many clients that
failed together do not retry together. Used by the fetcher, the operator's Job retries, the gate's
ConfigMap watch and the local node agent's container restarts."""

from __future__ import annotations

import random


def delay(attempt: int, first: float, ceiling: float | None = None) -> float:
    """The wait before retry `attempt` (1 for the first retry in a row): first x 2^(attempt-1), capped."""
    wait = first * 2.0 ** (attempt - 1)
    return wait if ceiling is None else min(ceiling, wait)


def jittered(seconds: float, spread: float = 0.2) -> float:
    """`seconds` moved by up to ±`spread` of itself, uniformly."""
    return seconds * random.uniform(1.0 - spread, 1.0 + spread)
