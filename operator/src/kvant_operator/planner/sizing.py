"""Capacity what-ifs in reverse: the GPU size at which a plan first holds a given number of KV tokens.

Used to size simulated GPUs for dry runs, tests and benchmarks with the planner's own arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import Checkpoint

_PRECISION_GIB = 1e-6


def gpu_memory_for_tokens(
    checkpoint: Checkpoint, tokens: int, request: PlanRequest, high_gib: float = 4096.0
) -> float:
    """The smallest GPU memory (GiB) whose plan holds at least `tokens` KV tokens per replica."""

    def capacity(gib: float) -> int:
        return make_plan(checkpoint, replace(request, gpu_memory_gib=gib)).kv_tokens_per_replica

    if capacity(high_gib) < tokens:
        raise ValueError(f"even {high_gib:g} GiB GPUs hold fewer than {tokens} KV tokens for this model")
    low, high = 0.0, high_gib
    while high - low > _PRECISION_GIB:
        mid = (low + high) / 2
        low, high = (mid, high) if capacity(mid) < tokens else (low, mid)
    return round(high, 6)
