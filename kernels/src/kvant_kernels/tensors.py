"""The kernels on torch tensors, for calibration, evaluation, tiny test models and tests.

Quantizing and FP8-block dequantizing go through the same raw-array kernels the converter runs
(`kvant_kernels.int4`, `kvant_kernels.fp8_block`), so there is one quantizer; this module only
converts between tensors and raw arrays, and adds what only tensor users need (unpack, dequantize,
FP8-block quantize for building FP8 test checkpoints).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from kvant_kernels import fp8_block
from kvant_kernels.bits import INT4_MIN
from kvant_kernels.fp8 import FP8_E4M3, FP8_E4M3_MAX

# safetensors dtype names ↔ torch dtypes.
TORCH_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in TORCH_DTYPES.items()}
# Integer dtypes of each width, to move any dtype's bytes between torch and numpy (no bfloat16 there).
_SAME_WIDTH: dict[int, tuple[torch.dtype, type[np.generic]]] = {
    1: (torch.uint8, np.uint8),
    2: (torch.int16, np.int16),
    4: (torch.int32, np.int32),
    8: (torch.int64, np.int64),
}


def from_raw(values: np.ndarray, dtype: str) -> torch.Tensor:
    """A tensor of safetensors dtype `dtype` over raw values of the same width (shares memory)."""
    target = TORCH_DTYPES[dtype]
    if values.size == 0:
        return torch.empty(values.shape, dtype=target)
    bits = np.ascontiguousarray(values).view(_SAME_WIDTH[target.itemsize][1])
    return torch.from_numpy(bits).view(target)


@dataclass(frozen=True)
class PackedInt4:
    """One Linear weight in `pack-quantized` form, named as the checkpoint names its tensors."""

    weight_packed: torch.Tensor
    weight_scale: torch.Tensor
    weight_shape: torch.Tensor


def compress_int4(
    weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None = None
) -> PackedInt4:
    """Quantizes and packs one Linear weight; `scale_dtype` defaults to the weight's dtype."""
    scale_dtype = scale_dtype or weight.dtype
    from kvant_kernels import int4  # noqa: PLC0415 - numba only where INT4 is quantized

    packed, scale = int4.quantize_pack(
        _raw(weight), DTYPE_NAMES[weight.dtype], group_size, DTYPE_NAMES[scale_dtype]
    )
    return PackedInt4(
        weight_packed=torch.from_numpy(packed),
        weight_scale=from_raw(scale, DTYPE_NAMES[scale_dtype]),
        weight_shape=torch.tensor(list(weight.shape), dtype=torch.int64),
    )


def unpack_int4(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """Integer codes in [-8, 7] as int8 `[out, cols]` from `pack-quantized` int32 words."""
    rows = packed.shape[0]
    packed_bytes = packed.contiguous().view(torch.uint8)
    if sys.byteorder == "big":
        packed_bytes = packed_bytes.view(rows, -1, 4).flip(-1).reshape(rows, -1)
    nibbles = torch.stack((packed_bytes & 0xF, packed_bytes >> 4), dim=-1).view(rows, -1)[:, :cols]
    return nibbles.to(torch.int8) + INT4_MIN


def decompress_int4(packed: PackedInt4) -> torch.Tensor:
    """Dequantized weight in the scale's dtype, as compressed-tensors decompresses it."""
    cols = int(packed.weight_shape[-1])
    scale = packed.weight_scale
    group_size = cols // scale.shape[-1]
    codes = unpack_int4(packed.weight_packed, cols).to(scale.dtype)
    grouped = codes.reshape(codes.shape[0], -1, group_size) * scale.unsqueeze(-1)
    return grouped.flatten(start_dim=-2)


def fake_quantize_int4(
    weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Quantize then dequantize: the weight an INT4 model really computes with."""
    return decompress_int4(compress_int4(weight, group_size, scale_dtype))


def dequantize_fp8_block(
    weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] = fp8_block.BLOCK
) -> torch.Tensor:
    """float32 values of an e4m3 block-scaled weight (see `kvant_kernels.fp8_block`)."""
    codes = weight.contiguous().view(torch.uint8).numpy()
    return torch.from_numpy(fp8_block.dequantize_fp8_block(codes, scale_inv.float().numpy(), block))


def quantize_fp8_block(
    weight: torch.Tensor, block: tuple[int, int] = fp8_block.BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (e4m3 weight, float32 weight_scale_inv) with scale = block absmax / 448."""
    rows, cols = weight.shape
    grid_rows, grid_cols = fp8_block.block_grid((rows, cols), block)
    padded = torch.nn.functional.pad(
        weight.float(), (0, grid_cols * block[1] - cols, 0, grid_rows * block[0] - rows)
    )
    blocks = padded.view(grid_rows, block[0], grid_cols, block[1])
    absmax = blocks.abs().amax(dim=(1, 3))
    scale_inv = torch.where(absmax > 0, absmax / FP8_E4M3_MAX, torch.ones_like(absmax))
    q = torch.clamp(blocks / scale_inv[:, None, :, None], -FP8_E4M3_MAX, FP8_E4M3_MAX).to(FP8_E4M3)
    return q.view(grid_rows * block[0], grid_cols * block[1])[:rows, :cols].contiguous(), scale_inv


def _raw(weight: torch.Tensor) -> np.ndarray:
    """The weight's bytes as a numpy array of same-width integers."""
    return weight.detach().cpu().contiguous().view(_SAME_WIDTH[weight.element_size()][0]).numpy()
