"""Sizing a simulated GPU with the product's own planner, so a test gets the KV capacity it needs."""

from __future__ import annotations

from pathlib import Path

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api.spec import WeightFormat
from kvant_operator.planner.capacity_plan import PlanRequest
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.sizing import gpu_memory_for_tokens as _solve

MEM_FRACTION = 0.9


def gpu_memory_for_tokens(checkpoint: Path, tokens: int, kv_dtype: KvCacheDtype = KvCacheDtype.BF16) -> float:
    """GPU GiB for `tokens` KV tokens with the e2e tiny model's serving shape (INT4 g32, mfs 0.9)."""
    request = PlanRequest(
        gpu_memory_gib=1.0,
        kv_cache_dtype=kv_dtype,
        weights_format=WeightFormat.INT4,
        group_size=32,
        mem_fraction_static=MEM_FRACTION,
    )
    return _solve(load_checkpoint(checkpoint), tokens, request)


# The tiny checkpoints' tokenizer is byte-level, one token per byte (kvant_dev.tinymodel), and the
# gate and the simulator count prompts with it: load shapes fill their prompts at this rate.
TINY_BYTES_PER_TOKEN = 1
