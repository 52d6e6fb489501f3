"""Reads the KV capacity the simulator needs from a `kvant plan --json` file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvant_contracts.kv_dtypes import KvCacheDtype


class PlanError(ValueError):
    """The plan file is missing, unreadable, or lacks a key the simulator needs."""


@dataclass(frozen=True)
class PlanCapacity:
    kv_tokens: int
    kv_bytes_per_token: int | None
    kv_cache_dtype: str
    page_size: int


def read_plan_capacity(path: Path) -> PlanCapacity:
    try:
        plan = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise PlanError(f"cannot read the plan {path}: {error}") from None
    if not isinstance(plan, dict):
        raise PlanError(f"{path}: a plan is a JSON object as printed by `kvant plan --json`")
    kv_tokens = _positive_int(plan, "kv_tokens_per_replica", path)
    assert kv_tokens is not None  # required=True raised otherwise
    return PlanCapacity(
        kv_tokens=kv_tokens,
        kv_bytes_per_token=_positive_int(plan, "kv_bytes_per_token_per_gpu", path, required=False),
        kv_cache_dtype=str(plan.get("kv_cache_dtype", KvCacheDtype.AUTO.value)),
        page_size=_positive_int(plan, "page_size", path, required=False) or 1,
    )


def _positive_int(plan: dict[str, Any], key: str, path: Path, required: bool = True) -> int | None:
    value = plan.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        found = "it is missing" if value is None else f"got {value!r}"
        raise PlanError(f"{path}: '{key}' must be a positive integer ({found}); run `kvant plan --json`")
    return value
