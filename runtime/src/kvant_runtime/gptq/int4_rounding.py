"""INT4 group rounding on torch tensors, with the arithmetic of `kvant_kernels.int4` (RTN), for GPTQ.

GPTQ chooses codes column by column from weights it keeps updating, so it cannot call the fused
RTN kernel; it rounds with the two functions here instead, which repeat that kernel's arithmetic:

- a group's scale is absmax / 7.5, divided in float32 and rounded once into the scale dtype; a zero
  scale becomes that dtype's eps;
- a code is weight / scale in float32, rounded into the quotient dtype (torch's promotion of the
  weight and scale dtypes, as compressed-tensors computes it), clamped to [-8, 7], rounded half to even.

So RTN through these functions equals the kernel bit for bit (tests/unit/test_gptq_solver_*.py), and
GPTQ with an identity Hessian is exactly RTN. Packing goes through `kvant_kernels.int4.pack_codes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from kvant_kernels.bits import INT4_MAX, INT4_MIN, SYMMETRIC_DIVISOR
from kvant_kernels.int4 import pack_codes
from kvant_kernels.tensors import TORCH_DTYPES


@dataclass(frozen=True)
class Rounding:
    """How one weight's codes and scales are rounded (what the converter would use for it)."""

    group_size: int
    scale_dtype: torch.dtype  # the dtype `weight_scale` is stored in
    quotient_dtype: torch.dtype  # weight / scale is rounded into this before rounding to a code

    @classmethod
    def for_source(cls, source_dtype: str, scale_dtype: str, group_size: int) -> Rounding:
        """The converter's rounding of a source tensor: an FP8-block weight is quantized from float32
        values with a BF16 scale (promoted: float32); a dense one in its own dtype."""
        weight = "F32" if source_dtype.startswith("F8_") else source_dtype
        quotient = weight if weight == scale_dtype else "F32"
        return cls(group_size, TORCH_DTYPES[scale_dtype], TORCH_DTYPES[quotient])


@dataclass(frozen=True)
class Rounded:
    """One weight's INT4 form: integer codes and per-(row, group) scales."""

    codes: torch.Tensor  # int8 [out, in], in [-8, 7]
    scale: torch.Tensor  # [out, in / group], in the scale dtype

    def dequantized(self) -> torch.Tensor:
        """What the INT4 model computes with, in float32 (a code times a scale is exact there)."""
        group = self.codes.shape[1] // self.scale.shape[1]
        values = self.codes.float().reshape(self.codes.shape[0], -1, group) * self.scale.float().unsqueeze(-1)
        return values.flatten(start_dim=1)

    def packed(self) -> npt.NDArray[np.int32]:
        """`weight_packed`, in the RTN kernel's layout."""
        return pack_codes(self.codes.cpu().numpy())


def group_scale(values: torch.Tensor, rounding: Rounding) -> torch.Tensor:
    """float32 scales `[rows]` (values of the scale dtype) of float32 `values [rows, group]`."""
    absmax = values.abs().amax(dim=-1)
    scale = (absmax / SYMMETRIC_DIVISOR).to(rounding.scale_dtype)
    eps = torch.finfo(rounding.scale_dtype).eps
    return torch.where(scale == 0, torch.full_like(scale, eps), scale).float()


def round_codes(values: torch.Tensor, scale: torch.Tensor, rounding: Rounding) -> torch.Tensor:
    """float32 integer codes of float32 `values` with float32 `scale` (broadcast against them)."""
    quotient = values / scale
    if rounding.quotient_dtype != torch.float32:
        quotient = quotient.to(rounding.quotient_dtype).float()
    return quotient.clamp(INT4_MIN, INT4_MAX).round()


def round_to_nearest(weight: torch.Tensor, rounding: Rounding) -> Rounded:
    """RTN of a float32 `[out, in]` weight: what the converter's kernel writes for it."""
    rows, cols = weight.shape
    groups = weight.float().reshape(rows, cols // rounding.group_size, rounding.group_size)
    scale = group_scale(groups, rounding)
    codes = round_codes(groups, scale.unsqueeze(-1), rounding).reshape(rows, cols)
    return Rounded(codes.to(torch.int8), scale.to(rounding.scale_dtype))
