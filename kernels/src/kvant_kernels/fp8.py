"""FP8 e4m3 quantization with one scale per tensor (weights, or KV-cache k_scale/v_scale).

`scale = absmax / 448` as a float32 multiplier: `x ≈ q.float() * scale`. Values beyond ±448 x scale
saturate, never become inf/nan.
"""

from __future__ import annotations

import torch

FP8_E4M3 = torch.float8_e4m3fn
FP8_E4M3_MAX = float(torch.finfo(FP8_E4M3).max)


def fp8_scale(absmax: torch.Tensor | float) -> torch.Tensor:
    """float32 scale mapping `absmax` onto the largest e4m3 value (1.0 for an all-zero tensor)."""
    scale = torch.as_tensor(absmax, dtype=torch.float32) / FP8_E4M3_MAX
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (e4m3 tensor, float32 scale); the scale is derived from `x` unless one is given."""
    if scale is None:
        scale = fp8_scale(x.abs().amax().float())
    q = torch.clamp(x.float() / scale, -FP8_E4M3_MAX, FP8_E4M3_MAX).to(FP8_E4M3)
    return q, scale


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (q.float() * scale).to(dtype)
