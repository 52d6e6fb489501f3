"""FP8 quantization with one scale per tensor (weights, or KV-cache k_scale/v_scale), in either of the
two formats SGLang's KV cache stores: e4m3 (largest value 448) and e5m2 (largest value 57344).

`scale = absmax / largest` as a float32 multiplier: `x ≈ q.float() * scale`. Values beyond
±largest x scale saturate, never become inf/nan. Weights are always e4m3.
"""

from __future__ import annotations

import torch

from kvant_contracts.kv_dtypes import KvCacheDtype

FP8_E4M3 = torch.float8_e4m3fn
FP8_E4M3_MAX = float(torch.finfo(FP8_E4M3).max)
# The KV cache formats by the name SGLang's --kv-cache-dtype (and spec.kvCache.dtype) gives them.
KV_FP8_FORMATS: dict[str, torch.dtype] = {
    KvCacheDtype.FP8_E4M3.value: FP8_E4M3,
    KvCacheDtype.FP8_E5M2.value: torch.float8_e5m2,
}


def fp8_format(name: str) -> torch.dtype:
    """The torch dtype of a KV cache format name; ValueError naming the valid ones otherwise."""
    try:
        return KV_FP8_FORMATS[name]
    except KeyError:
        raise ValueError(f"{name!r} is not an FP8 KV format; valid: {', '.join(KV_FP8_FORMATS)}") from None


def fp8_scale(absmax: torch.Tensor | float, dtype: torch.dtype = FP8_E4M3) -> torch.Tensor:
    """float32 scale mapping `absmax` onto the largest value of `dtype` (1.0 for an all-zero tensor)."""
    scale = torch.as_tensor(absmax, dtype=torch.float32) / float(torch.finfo(dtype).max)
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def quantize_fp8(
    x: torch.Tensor, scale: torch.Tensor | None = None, dtype: torch.dtype = FP8_E4M3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (FP8 tensor of `dtype`, float32 scale); the scale is derived from `x` unless given."""
    if scale is None:
        scale = fp8_scale(x.abs().amax().float(), dtype)
    largest = float(torch.finfo(dtype).max)
    q = torch.clamp(x.float() / scale, -largest, largest).to(dtype)
    return q, scale


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (q.float() * scale).to(dtype)
