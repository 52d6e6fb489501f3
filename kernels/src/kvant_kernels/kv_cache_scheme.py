"""The compressed-tensors `kv_cache_scheme` Kvant declares for calibrated FP8 KV scales (torch-free,
so the converter can write it without importing torch)."""

from __future__ import annotations

from typing import Any

# compressed-tensors' `kv_cache_scheme` for static per-tensor FP8: what SGLang's compressed-tensors
# loader accepts (`CompressedTensorsKVCacheMethod.is_supported_scheme`) to read k_scale / v_scale.
KV_CACHE_SCHEME: dict[str, Any] = {
    "num_bits": 8,
    "type": "float",
    "symmetric": True,
    "strategy": "tensor",
    "dynamic": False,
}
