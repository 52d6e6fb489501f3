"""FP8 e4m3 with one float32 scale per tensor: absmax maps to 448, beyond saturates."""

import pytest
import torch

from kvant_kernels.fp8 import FP8_E4M3_MAX, dequantize_fp8, fp8_scale, quantize_fp8


def test_absmax_maps_to_largest_e4m3_value():
    x = torch.tensor([0.5, -3.0, 1.25])
    q, scale = quantize_fp8(x)
    assert scale.item() == pytest.approx(3.0 / FP8_E4M3_MAX)
    assert q.float().abs().max().item() == FP8_E4M3_MAX
    assert torch.allclose(dequantize_fp8(q, scale), x, rtol=2**-3)


def test_values_beyond_the_scale_saturate_instead_of_overflowing():
    q, scale = quantize_fp8(torch.tensor([1000.0, -1000.0]), scale=torch.tensor(1.0))
    assert dequantize_fp8(q, scale).tolist() == [FP8_E4M3_MAX, -FP8_E4M3_MAX]


def test_all_zero_tensor_gets_unit_scale():
    assert fp8_scale(0.0).item() == 1.0
