"""Float32 to FP8 e4m3 in a Triton kernel: the GPU's own conversion instruction, as a second opinion.

PyTorch's `.to(torch.float8_e4m3fn)` rounds with PyTorch's conversion routine on either device. This
kernel clamps to ±448 as `kvant_kernels.fp8.quantize_fp8` does, then lets Triton lower the cast to
the hardware instruction (`cvt.rn.satfinite.e4m3x2.f32` on sm_89 and later: round to nearest, ties
to even). It needs a CUDA device; Triton's CPU interpreter does not round FP8 the same way.
"""

from __future__ import annotations

from typing import Any

import torch
import triton  # type: ignore[import-untyped]
import triton.language as tl  # type: ignore[import-untyped]

from kvant_kernels.fp8 import FP8_E4M3, FP8_E4M3_MAX
from kvant_runtime.checkpoint.kv_tap import KVTap

BLOCK = 1024


@triton.jit  # type: ignore[untyped-decorator]
def _round_to_e4m3(values, codes, count, limit, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < count
    value = tl.load(values + offsets, mask=inside, other=0.0)
    value = tl.minimum(tl.maximum(value, -limit), limit)
    tl.store(codes + offsets, value.to(tl.float8e4nv, fp_downcast_rounding="rtne"), mask=inside)


def to_e4m3(values: torch.Tensor) -> torch.Tensor:
    """e4m3 of float32 `values` (already divided by the scale), saturating at ±448; same shape.

    NaN inputs are not defined here (the clamp may drop them); callers compare finite values only.
    """
    if values.device.type != "cuda":
        raise ValueError(f"the Triton FP8 kernel needs a CUDA tensor, got one on {values.device}")
    flat = values.detach().float().contiguous().view(-1)
    codes = torch.empty(flat.shape, dtype=FP8_E4M3, device=flat.device)
    grid = (triton.cdiv(flat.numel(), BLOCK),)
    _round_to_e4m3[grid](flat, codes, flat.numel(), FP8_E4M3_MAX, BLOCK=BLOCK)
    return codes.view(values.shape)


def fake_quantize_kv(x: torch.Tensor, scale: float) -> torch.Tensor:
    """`kvant_kernels.kv_scales.fake_quantize_kv` with the rounding done by the hardware instruction."""
    scale_tensor = torch.tensor(scale, dtype=torch.float32, device=x.device)
    return (to_e4m3(x.float() / scale_tensor).float() * scale_tensor).to(x.dtype)


class HardwareFp8Tap(KVTap):
    """Kvant's `KVTap` for a GQA cache, with the FP8 rounding done by the hardware instruction."""

    def update(
        self, first: torch.Tensor, second: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.kind != "gqa" or self.scales is None:
            raise ValueError("HardwareFp8Tap emulates a GQA cache with given scales")
        self.absmax.observe(layer_idx, first, second)
        k_scale, v_scale = self.scales[layer_idx]
        return fake_quantize_kv(first, k_scale), fake_quantize_kv(second, v_scale)
