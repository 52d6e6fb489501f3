"""Sizing a simulated GPU with the product's own planner, so a test gets the KV capacity it needs."""

from __future__ import annotations

from pathlib import Path

from kvant_operator.api.spec import KvCacheDtype, WeightFormat
from kvant_operator.planner.checkpoint import load_checkpoint
from kvant_operator.planner.plan import PlanRequest, make_plan

MEM_FRACTION = 0.9


def gpu_memory_for_tokens(checkpoint: Path, tokens: int, kv_dtype: KvCacheDtype = KvCacheDtype.BF16) -> float:
    """The smallest GPU size (GiB, to 1e-6) whose plan holds at least `tokens` KV tokens per replica."""
    loaded = load_checkpoint(checkpoint)

    def capacity(gib: float) -> int:
        request = PlanRequest(
            gpu_memory_gib=gib,
            kv_cache_dtype=kv_dtype,
            weights_format=WeightFormat.INT4,
            group_size=32,
            mem_fraction_static=MEM_FRACTION,
        )
        return make_plan(loaded, request).kv_tokens_per_replica

    low, high = 1.0, 4.0
    while high - low > 1e-6:
        mid = (low + high) / 2
        low, high = (mid, high) if capacity(mid) < tokens else (low, mid)
    return round(high, 6)
