"""The numba kernel behind `kvant_kernels.int4.quantize_pack`: one fused pass per row (load, absmax,
divide, round, pack). Kept apart so that importing `int4` (group sizes, checks) needs no numba."""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

from kvant_kernels.bits import INT4_MAX, INT4_MIN, NIBBLES_PER_WORD, SYMMETRIC_DIVISOR


@numba.njit(nogil=True, cache=True)
def _round_to_format(x: np.float32, mantissa_bits: int, min_exponent: int) -> np.float32:
    """Rounds a float32 value half-to-even into a format with that many mantissa bits, subnormals included."""
    if x == 0.0:
        return np.float32(x)
    exponent = max(math.frexp(x)[1] - 1, min_exponent)
    ulp = math.ldexp(1.0, exponent - mantissa_bits)
    return np.float32(np.rint(x / ulp) * ulp)


@numba.njit(nogil=True, cache=True)
def _row_scales(
    values: npt.NDArray[np.float32],
    group_size: int,
    scale_format: tuple[int, int, float],
    out: npt.NDArray[np.float32],
) -> None:
    mantissa_bits, min_exponent, eps = scale_format
    divisor = np.float32(SYMMETRIC_DIVISOR)
    for group in range(out.shape[0]):
        absmax = np.float32(0.0)
        for value in values[group * group_size : (group + 1) * group_size]:
            absmax = max(absmax, abs(value))
        scale = _round_to_format(absmax / divisor, mantissa_bits, min_exponent)
        out[group] = scale if scale != 0.0 else np.float32(eps)


@numba.njit(nogil=True, cache=True)
def _round_bits(bits: npt.NDArray[np.uint32], shift: int) -> None:
    """Round half to even, in place, to float32 bits with the lowest `shift` mantissa bits cleared.

    Exact for every value that can round to a non-zero integer code; for fp16 the values below
    its normal range (< 2^-14) are rounded as if normal, which still yields code 0.
    """
    if shift == 0:
        return
    half = np.uint32((1 << (shift - 1)) - 1)
    keep = np.uint32(~((1 << shift) - 1) & 0xFFFFFFFF)
    shift_bits, one = np.uint32(shift), np.uint32(1)
    for i in range(bits.shape[0]):
        bits[i] = (bits[i] + half + ((bits[i] >> shift_bits) & one)) & keep


@numba.njit(nogil=True, cache=True)
def quantize_pack_rows(  # noqa: PLR0917 (numba kernels take no keyword-only arguments)
    source: npt.NDArray[np.generic],
    shift_in: int,
    group_size: int,
    quotient_shift: int,
    scale_format: tuple[int, int, float],
    packed: npt.NDArray[np.uint32],
    scales: npt.NDArray[np.float32],
) -> None:
    cols = source.shape[1]
    bits = np.empty(cols, dtype=np.uint32)
    values = bits.view(np.float32)
    low, high = np.float32(INT4_MIN), np.float32(INT4_MAX)
    widen = np.uint32(shift_in)
    for row in range(source.shape[0]):
        for col in range(cols):
            bits[col] = np.uint32(source[row, col]) << widen
        _row_scales(values, group_size, scale_format, scales[row])
        for group in range(scales.shape[1]):
            scale = scales[row, group]
            for col in range(group * group_size, (group + 1) * group_size):
                values[col] = values[col] / scale
        _round_bits(bits, quotient_shift)
        for word in range(packed.shape[1]):
            packed_word = np.uint32(0)
            for nibble in range(NIBBLES_PER_WORD):
                value = values[word * NIBBLES_PER_WORD + nibble]
                code = np.uint32(np.rint(min(max(value, low), high)) - low)
                packed_word |= code << np.uint32(4 * nibble)
            packed[row, word] = packed_word
