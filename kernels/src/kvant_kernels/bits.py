"""Bit patterns of the float formats numpy lacks: bfloat16 and FP8 e4m3.

The converter keeps such tensors as raw unsigned integers (uint16, uint8) and goes through float32,
which holds every bf16 and e4m3 value exactly.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# The signed INT4 range. Here, not in int4.py, so that reading INT4 weights (unpacking) needs no
# numba: only quantizing does (calibration and evaluation of an INT4 artifact run without it).
INT4_MIN = -8
INT4_MAX = 7
# compressed-tensors' symmetric divisor, and the codes packed in one int32 word: shared by the numpy
# packer (int4.py) and the numba kernel (int4_kernel.py), which import nothing of each other.
SYMMETRIC_DIVISOR = (INT4_MAX - INT4_MIN) / 2
NIBBLES_PER_WORD = 8

_E4M3_EXPONENT_BIAS = 7


def bf16_bits(values: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """float32 → bfloat16 bits, rounded half to even as torch does (NaN stays a quiet NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def bf16_values(bits: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
    """bfloat16 bits → float32 (exact)."""
    values: npt.NDArray[np.float32] = (bits.astype(np.uint32) << 16).view(np.float32)
    return values


def _e4m3_table() -> npt.NDArray[np.float32]:
    code = np.arange(256, dtype=np.int64)
    sign = np.where(code & 0x80, -1.0, 1.0)
    exponent = (code >> 3) & 0xF
    mantissa = code & 0x7
    normal = (1 + mantissa / 8) * np.exp2(exponent - _E4M3_EXPONENT_BIAS)
    subnormal = (mantissa / 8) * np.exp2(1 - _E4M3_EXPONENT_BIAS)
    values = sign * np.where(exponent == 0, subnormal, normal)
    values[(code & 0x7F) == 0x7F] = np.nan  # e4m3fn has no infinities; S.1111.111 is NaN
    table: npt.NDArray[np.float32] = values.astype(np.float32)
    return table


E4M3_VALUES = _e4m3_table()


def e4m3_values(codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """FP8 e4m3fn bytes → float32 (exact), by table lookup."""
    values: npt.NDArray[np.float32] = E4M3_VALUES[codes]
    return values
