"""FP8-block dequantization: weight_scale_inv is a per-128x128-block multiplier, edge blocks cropped."""

import math

import pytest
import torch

from kvant_kernels.fp8 import FP8_E4M3
from kvant_kernels.tensors import dequantize_fp8_block, quantize_fp8_block


def blockwise_reference(weight: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    out = torch.empty(weight.shape, dtype=torch.float32)
    for i in range(scale_inv.shape[0]):
        for j in range(scale_inv.shape[1]):
            rows, cols = slice(128 * i, 128 * (i + 1)), slice(128 * j, 128 * (j + 1))
            out[rows, cols] = weight[rows, cols].float() * scale_inv[i, j]
    return out


@pytest.mark.parametrize("shape", [(256, 384), (144, 128), (300, 200), (5, 7)])
def test_dequantize_multiplies_each_block_by_its_scale(shape):
    torch.manual_seed(1)
    weight = (torch.randn(shape) * 100).clamp(-448, 448).to(FP8_E4M3)
    grid = (math.ceil(shape[0] / 128), math.ceil(shape[1] / 128))
    scale_inv = torch.rand(grid) + 0.5
    assert torch.equal(dequantize_fp8_block(weight, scale_inv), blockwise_reference(weight, scale_inv))


def test_wrong_scale_grid_names_both_shapes():
    weight = torch.zeros(144, 128).to(FP8_E4M3)
    with pytest.raises(ValueError, match=r"\[1, 1\].*\[144, 128\].*needs \[2, 1\]"):
        dequantize_fp8_block(weight, torch.ones(1, 1))


def test_quantize_then_dequantize_is_within_e4m3_precision():
    torch.manual_seed(2)
    weight = torch.randn(200, 300) * 0.02
    q, scale_inv = quantize_fp8_block(weight)
    assert q.dtype == FP8_E4M3 and q.shape == weight.shape and scale_inv.shape == (2, 3)
    restored = dequantize_fp8_block(q, scale_inv)
    # e4m3 keeps 3 mantissa bits: relative error at most 2^-4 of each block's scale range
    assert torch.all((restored - weight).abs() <= weight.abs() * 2**-4 + scale_inv.max() * 2**-6)
