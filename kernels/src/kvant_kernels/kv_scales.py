"""FP8 KV-cache scales: per-layer absmax of what the cache stores, turned into `k_scale`/`v_scale`.

SGLang stores `x / scale` in the cache's format (e4m3 or e5m2) and multiplies by `scale` when reading,
so a value beyond `largest x scale` saturates (448 for e4m3, 57344 for e5m2). Calibration sees a few
samples, and real traffic can go beyond their absmax, so the scale carries a safety margin:

    scale = absmax x SAFETY_MARGIN / largest

The margin is a factor 2, one binade. Both formats are floating point, so their relative precision is
the same in every binade. The headroom therefore costs precision only at the very bottom (values
under 2^-6 x scale become subnormal), while any value the samples did not reach keeps its magnitude
instead of clipping at 448 x scale. Clipping is what breaks accuracy; the lost binade almost never
does.
"""

from __future__ import annotations

import math

import torch

from kvant_kernels.fp8 import dequantize_fp8, fp8_format, fp8_scale, quantize_fp8

SAFETY_MARGIN = 2.0


def kv_cache_scale(absmax: float, kv_dtype: str, margin: float = SAFETY_MARGIN) -> float:
    """The float32 scale for a KV tensor whose calibrated absmax is `absmax` (1.0 if it was all zero),
    in the cache format `kv_dtype` (fp8_e4m3 or fp8_e5m2)."""
    if margin < 1.0:
        raise ValueError(f"safety margin {margin} is below 1: the calibrated absmax itself would saturate")
    return float(fp8_scale(absmax * margin, fp8_format(kv_dtype)))


def fake_quantize_kv(x: torch.Tensor, scale: float, kv_dtype: str) -> torch.Tensor:
    """What attention reads back from a `kv_dtype` KV cache written with `scale`: quantize, dequantize."""
    dtype = fp8_format(kv_dtype)
    scale_tensor = torch.tensor(scale, dtype=torch.float32, device=x.device)
    q, _ = quantize_fp8(x, scale_tensor, dtype)
    return dequantize_fp8(q, scale_tensor, x.dtype)


class LayerAbsmax:
    """Running per-layer absmax of K and V over every sample, head and token: one value per tensor."""

    def __init__(self) -> None:
        self._k: dict[int, float] = {}
        self._v: dict[int, float] = {}

    def observe(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self._k[layer] = max(self._k.get(layer, 0.0), _absmax(k))
        self._v[layer] = max(self._v.get(layer, 0.0), _absmax(v))

    def layers(self) -> list[int]:
        return sorted(self._k)

    def k(self, layer: int) -> float:
        return self._k[layer]

    def v(self, layer: int) -> float:
        return self._v[layer]


def _absmax(x: torch.Tensor) -> float:
    value = float(x.detach().abs().amax().float())
    if not math.isfinite(value):  # nan or inf: the model itself is broken
        raise ValueError(f"KV values are not finite (absmax {value}); the checkpoint's weights are broken")
    return value
