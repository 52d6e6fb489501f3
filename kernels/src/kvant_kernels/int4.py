"""Symmetric INT4 group quantization into compressed-tensors' `pack-quantized` layout, without torch.

Layout per Linear weight `[out, in]`:
- `weight_packed` int32 `[out, in/8]`: nibble `k` sits in bits `4*(k%8)` of word `k//8`, stored as q+8;
- `weight_scale` `[out, in/group]`, in the scale dtype;
- `weight_shape` int64 `[2]`.

The arithmetic reproduces compressed-tensors 0.20.1's CPU path (torch) bit for bit:
- scale = absmax / 7.5, divided in float32 and rounded once into the scale dtype; a zero scale
  becomes that dtype's eps;
- q = weight / scale, divided in float32 and rounded into the promoted dtype of weight and scale
  (torch computes bf16/fp16 arithmetic in float32 and rounds the result), then clamped to
  [-8, 7] and rounded half to even.

One fused pass per row (load, absmax, divide, round, pack) instead of torch's chain of full-size
temporaries: the converter is compute-bound here, and this module keeps torch (~0.7 GB of RSS on
import) out of the converter process. Tensors are raw bit patterns (`uint16` for BF16/F16,
`float32` for F32) named by their safetensors dtype, so no dtype needs numpy support.
`pack_codes` packs codes that a caller chose itself (GPTQ) into the same layout, without the kernel.
The kernel (`int4_kernel.py`) is compiled by numba on first use and cached on disk
(`NUMBA_CACHE_DIR`); it is imported only when a weight is quantized, so reading INT4 artifacts
(calibration, evaluation) needs no numba.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kvant_kernels.bits import INT4_MAX, INT4_MIN, NIBBLES_PER_WORD, bf16_bits

GROUP_SIZES = (32, 64, 128)


class FloatFormat:
    """A binary float format the kernel rounds into: mantissa bits, smallest normal exponent, eps."""

    def __init__(self, mantissa_bits: int, min_exponent: int, raw: type[np.generic]) -> None:
        self.mantissa_bits = mantissa_bits
        self.min_exponent = min_exponent
        self.eps = 2.0**-mantissa_bits
        self.raw = raw

    @property
    def kernel_args(self) -> tuple[int, int, float]:
        """What the numba kernel needs of the format, as one plain tuple."""
        return self.mantissa_bits, self.min_exponent, self.eps


FORMATS: dict[str, FloatFormat] = {
    "BF16": FloatFormat(7, -126, np.uint16),
    "F16": FloatFormat(10, -14, np.float16),
    "F32": FloatFormat(23, -126, np.float32),
}


def check_groupable(shape: tuple[int, ...], group_size: int) -> None:
    """Raises ValueError unless a weight of `shape` can be grouped (and so packed) by `group_size`."""
    if len(shape) != 2:
        raise ValueError(f"INT4 group quantization needs a 2-D [out, in] weight, got shape {list(shape)}")
    if shape[1] % group_size != 0:
        raise ValueError(
            f"input dimension {shape[1]} of shape {list(shape)} is not divisible by group size {group_size}; "
            f"use a group size that divides it ({', '.join(map(str, GROUP_SIZES))}) or ignore the tensor"
        )


def quantize_pack(
    weight: npt.NDArray[np.generic], dtype: str, group_size: int, scale_dtype: str | None = None
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.generic]]:
    """(`weight_packed`, `weight_scale`) for a raw `[out, in]` weight of safetensors dtype `dtype`.

    `weight` holds BF16 as uint16 bits, F16 as float16 (or its uint16 bits), F32 as float32;
    the scale comes back in the same raw form for `scale_dtype` (default: the weight's dtype).
    """
    check_groupable(tuple(weight.shape), group_size)
    scale_dtype = scale_dtype or dtype
    rows, cols = weight.shape
    packed = np.empty((rows, cols // NIBBLES_PER_WORD), dtype=np.uint32)
    scale = np.empty((rows, cols // group_size), dtype=np.float32)
    from kvant_kernels.int4_kernel import quantize_pack_rows  # noqa: PLC0415 - numba only here

    quantize_pack_rows(
        *_float32_bits(weight, dtype),
        group_size,
        _quotient_shift(dtype, scale_dtype),
        FORMATS[scale_dtype].kernel_args,
        packed,
        scale,
    )
    return packed.view(np.int32), _raw_scale(scale, scale_dtype)


def pack_codes(codes: npt.NDArray[np.generic]) -> npt.NDArray[np.int32]:
    """`weight_packed` for integer codes in [-8, 7] of shape `[out, in]` (in divisible by 8): the same
    nibble layout `quantize_pack` writes, for quantizers that choose the codes themselves (GPTQ)."""
    rows, cols = codes.shape
    if cols % NIBBLES_PER_WORD != 0:
        raise ValueError(f"input dimension {cols} is not divisible by {NIBBLES_PER_WORD}")
    values = codes.astype(np.int64)
    if values.size and (int(values.min()) < INT4_MIN or int(values.max()) > INT4_MAX):
        raise ValueError(f"INT4 codes must lie in [{INT4_MIN}, {INT4_MAX}]")
    nibbles = (values - INT4_MIN).astype(np.uint32).reshape(rows, -1, NIBBLES_PER_WORD)
    shifts = np.arange(NIBBLES_PER_WORD, dtype=np.uint32) * np.uint32(4)
    words: npt.NDArray[np.uint32] = np.bitwise_or.reduce(nibbles << shifts, axis=-1)
    return words.view(np.int32)


def _float32_bits(weight: npt.NDArray[np.generic], dtype: str) -> tuple[npt.NDArray[np.generic], int]:
    """The weight as unsigned bits plus the left shift that turns them into float32 bits."""
    contiguous = np.ascontiguousarray(weight)
    if dtype == "BF16":
        return contiguous.view(np.uint16), 16
    if dtype == "F16":  # fp16 → fp32 is exact; numba has no fp16 arithmetic on CPU
        return contiguous.view(np.float16).astype(np.float32).view(np.uint32), 0
    if dtype == "F32":
        return contiguous.view(np.uint32), 0
    raise ValueError(f"cannot quantize dtype {dtype} to INT4 (supported: {', '.join(FORMATS)})")


def _quotient_shift(dtype: str, scale_dtype: str) -> int:
    """Low float32 mantissa bits to round away from weight / scale: torch's promoted dtype."""
    promoted = dtype if dtype == scale_dtype else "F32"
    return FORMATS["F32"].mantissa_bits - FORMATS[promoted].mantissa_bits


def _raw_scale(scale: npt.NDArray[np.float32], scale_dtype: str) -> npt.NDArray[np.generic]:
    """float32 scales (already rounded into `scale_dtype`) in that dtype's raw form; exact."""
    if scale_dtype == "BF16":
        return bf16_bits(scale)
    return scale.astype(FORMATS[scale_dtype].raw)
