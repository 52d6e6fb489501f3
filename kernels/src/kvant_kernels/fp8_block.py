"""FP8 block-scaled weights, DeepSeek-V3 / GLM style, on raw arrays (no torch).

A weight `[out, in]` is e4m3 with `weight_scale_inv` float32 `[ceil(out/B0), ceil(in/B1)]`
(B = 128 x 128). Despite its name the scale is a multiplier: `w = q * scale_inv[block]`.
Blocks at the right and bottom edges are cropped to the weight's shape.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kvant_kernels.bits import e4m3_values

BLOCK = (128, 128)


def block_grid(shape: tuple[int, ...], block: tuple[int, int] = BLOCK) -> tuple[int, int]:
    """Shape of the scale grid for a weight of `shape`."""
    return math.ceil(shape[0] / block[0]), math.ceil(shape[1] / block[1])


def dequantize_fp8_block(
    codes: npt.NDArray[np.uint8], scale_inv: npt.NDArray[np.float32], block: tuple[int, int] = BLOCK
) -> npt.NDArray[np.float32]:
    """float32 values of an FP8-block weight given as e4m3 bytes: one rounding (e4m3 x f32 in f32)."""
    if codes.ndim != 2:
        raise ValueError(f"FP8-block weight must be 2-D [out, in], got shape {list(codes.shape)}")
    expected = block_grid(codes.shape, block)
    if tuple(scale_inv.shape) != expected:
        raise ValueError(
            f"weight_scale_inv has shape {list(scale_inv.shape)}, but a weight of shape {list(codes.shape)} "
            f"with {block[0]}x{block[1]} blocks needs {list(expected)}"
        )
    values: npt.NDArray[np.float32] = e4m3_values(codes)
    row_scales = np.repeat(scale_inv.astype(np.float32), block[0], axis=0)[: codes.shape[0]]
    for column in range(expected[1]):  # in place, one block column at a time: no full-size scale grid
        values[:, column * block[1] : (column + 1) * block[1]] *= row_scales[:, column : column + 1]
    return values
