"""FP8 block-scaled weights, DeepSeek-V3 / GLM style.

A weight `[out, in]` is e4m3 with `weight_scale_inv` float32 `[ceil(out/B0), ceil(in/B1)]`
(B = 128 x 128). Despite its name the scale is a multiplier: `w = q * scale_inv[block]`.
Blocks at the right and bottom edges are cropped to the weight's shape.
"""

from __future__ import annotations

import math

import torch

from kvant_kernels.fp8 import FP8_E4M3, FP8_E4M3_MAX

BLOCK = (128, 128)


def block_grid(shape: tuple[int, ...], block: tuple[int, int] = BLOCK) -> tuple[int, int]:
    """Shape of the scale grid for a weight of `shape`."""
    return math.ceil(shape[0] / block[0]), math.ceil(shape[1] / block[1])


def dequantize_fp8_block(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] = BLOCK
) -> torch.Tensor:
    """float32 values of an FP8-block weight (no rounding: e4m3 x f32 is exact in f32 up to one rounding)."""
    if weight.ndim != 2:
        raise ValueError(f"FP8-block weight must be 2-D [out, in], got shape {list(weight.shape)}")
    expected = block_grid(tuple(weight.shape), block)
    if tuple(scale_inv.shape) != expected:
        raise ValueError(
            f"weight_scale_inv has shape {list(scale_inv.shape)}, but a weight of shape {list(weight.shape)} "
            f"with {block[0]}x{block[1]} blocks needs {list(expected)}"
        )
    rows, cols = weight.shape
    scale = scale_inv.float().repeat_interleave(block[0], dim=0)[:rows].repeat_interleave(block[1], dim=1)
    return weight.float() * scale[:, :cols]


def quantize_fp8_block(
    weight: torch.Tensor, block: tuple[int, int] = BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (e4m3 weight, float32 weight_scale_inv) with scale = block absmax / 448."""
    rows, cols = weight.shape
    grid_rows, grid_cols = block_grid((rows, cols), block)
    padded = torch.nn.functional.pad(
        weight.float(), (0, grid_cols * block[1] - cols, 0, grid_rows * block[0] - rows)
    )
    blocks = padded.view(grid_rows, block[0], grid_cols, block[1])
    absmax = blocks.abs().amax(dim=(1, 3))
    scale_inv = torch.where(absmax > 0, absmax / FP8_E4M3_MAX, torch.ones_like(absmax))
    q = torch.clamp(blocks / scale_inv[:, None, :, None], -FP8_E4M3_MAX, FP8_E4M3_MAX).to(FP8_E4M3)
    return q.view(grid_rows * block[0], grid_cols * block[1])[:rows, :cols].contiguous(), scale_inv
