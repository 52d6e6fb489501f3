"""Symmetric INT4 group quantization in compressed-tensors' `pack-quantized` layout.

Layout per Linear weight `[out, in]`:
- `weight_packed` int32 `[out, in/8]`: nibble `k` sits in bits `4*(k%8)` of word `k//8`, stored as q+8;
- `weight_scale` `[out, in/group]`;
- `weight_shape` int64 `[2]`.

The arithmetic follows compressed-tensors 0.20.1's CPU path step by step so the result is
bit-exact with its quantizer: the scale is `absmax / 7.5` computed in the scale dtype (by default the
weight's own dtype), a zero scale becomes that dtype's eps, and `weight / scale` is evaluated in the
promoted dtype of the two before clamping to [-8, 7] and rounding half to even.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

INT4_MIN = -8
INT4_MAX = 7
# compressed-tensors' symmetric divisor: (INT4_MAX - INT4_MIN) / 2.
SYMMETRIC_DIVISOR = (INT4_MAX - INT4_MIN) / 2
NIBBLES_PER_WORD = 8
GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class PackedInt4:
    """One Linear weight in `pack-quantized` form, named as the checkpoint names its tensors."""

    weight_packed: torch.Tensor
    weight_scale: torch.Tensor
    weight_shape: torch.Tensor


def check_groupable(shape: tuple[int, ...], group_size: int) -> None:
    """Raises ValueError unless a weight of `shape` can be grouped (and so packed) by `group_size`."""
    if len(shape) != 2:
        raise ValueError(f"INT4 group quantization needs a 2-D [out, in] weight, got shape {list(shape)}")
    if shape[1] % group_size != 0:
        raise ValueError(
            f"input dimension {shape[1]} of shape {list(shape)} is not divisible by group size {group_size}; "
            f"use a group size that divides it ({', '.join(map(str, GROUP_SIZES))}) or ignore the tensor"
        )


def group_scales(
    weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Symmetric per-group scales `[out, in/group]`: absmax / 7.5, zeros replaced by the dtype's eps."""
    check_groupable(tuple(weight.shape), group_size)
    groups = _grouped(weight, group_size)
    absmax = torch.maximum(groups.amax(dim=-1), -groups.amin(dim=-1))  # |w| max without a full-size temporary
    dtype = scale_dtype or weight.dtype
    # Divide in the weight's dtype when it is the scale dtype, as compressed-tensors does; otherwise
    # divide in fp32 and round the scale once into the dtype it is stored in.
    if dtype == weight.dtype:
        scale = absmax / SYMMETRIC_DIVISOR
    else:
        scale = (absmax.float() / SYMMETRIC_DIVISOR).to(dtype)
    return scale.masked_fill_(scale == 0, torch.finfo(dtype).eps)


def _grouped(weight: torch.Tensor, group_size: int) -> torch.Tensor:
    """`[out, in]` viewed as `[out, in/group, group]`."""
    return weight.reshape(weight.shape[0], -1, group_size)


def _unsigned_codes(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q + 8 as uint8 `[out, in]`, q = round(clamp(weight / scale, -8, 7)); in place after the divide."""
    group_size = weight.shape[-1] // scale.shape[-1]
    scaled = _grouped(weight, group_size) / scale.unsqueeze(-1)
    # Integers in [-8, 15] are exact in every float dtype, so the offset adds no rounding.
    unsigned = scaled.clamp_(INT4_MIN, INT4_MAX).round_().sub_(INT4_MIN).to(torch.uint8)
    return unsigned.view(weight.shape)


def _pack_unsigned(unsigned: torch.Tensor) -> torch.Tensor:
    rows, cols = unsigned.shape
    if cols % NIBBLES_PER_WORD != 0:
        raise ValueError(f"cannot pack {cols} columns into int32 words: not a multiple of {NIBBLES_PER_WORD}")
    pairs = unsigned.view(rows, -1, 2)
    packed_bytes = pairs[..., 1] << 4
    packed_bytes |= pairs[..., 0]
    if sys.byteorder == "big":
        packed_bytes = packed_bytes.view(rows, -1, 4).flip(-1).reshape(rows, -1)
    return packed_bytes.contiguous().view(torch.int32)


def quantize_int4(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Integer codes in [-8, 7] as int8 `[out, in]` for a weight and its group scales."""
    return _unsigned_codes(weight, scale).view(torch.int8) + INT4_MIN


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Packs int8 codes `[out, in]` into int32 words `[out, in/8]` (nibble k at bits 4*(k%8), as q+8)."""
    return _pack_unsigned((codes - INT4_MIN).view(torch.uint8))


def unpack_int4(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """Inverse of `pack_int4`: int8 codes `[out, cols]`."""
    rows = packed.shape[0]
    packed_bytes = packed.contiguous().view(torch.uint8)
    if sys.byteorder == "big":
        packed_bytes = packed_bytes.view(rows, -1, 4).flip(-1).reshape(rows, -1)
    nibbles = torch.stack((packed_bytes & 0xF, packed_bytes >> 4), dim=-1).view(rows, -1)[:, :cols]
    return nibbles.to(torch.int8) + INT4_MIN


def compress_int4(
    weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None = None
) -> PackedInt4:
    """Quantizes and packs one Linear weight; `scale_dtype` defaults to the weight's dtype."""
    scale = group_scales(weight, group_size, scale_dtype)
    return PackedInt4(
        weight_packed=_pack_unsigned(_unsigned_codes(weight, scale)),
        weight_scale=scale,
        weight_shape=torch.tensor(list(weight.shape), dtype=torch.int64),
    )


def decompress_int4(packed: PackedInt4) -> torch.Tensor:
    """Dequantized weight in the scale's dtype, as compressed-tensors decompresses it."""
    cols = int(packed.weight_shape[-1])
    scale = packed.weight_scale
    group_size = cols // scale.shape[-1]
    codes = unpack_int4(packed.weight_packed, cols).to(scale.dtype)
    dequantized: torch.Tensor = (_grouped(codes, group_size) * scale.unsqueeze(-1)).flatten(start_dim=-2)
    return dequantized


def fake_quantize_int4(
    weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Quantize then dequantize: the weight an INT4 model really computes with."""
    return decompress_int4(compress_int4(weight, group_size, scale_dtype))
