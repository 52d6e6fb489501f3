"""With a diagonal Hessian (identity, or any diagonal, with or without act-order) GPTQ passes no error on,
so its codes and scales equal the RTN kernel's bit for bit, and its packing is the kernel's layout."""

import numpy as np
import pytest
import torch

from kvant_kernels.int4 import quantize_pack
from kvant_kernels.tensors import DTYPE_NAMES
from kvant_runtime.gptq.gptq_solver import gptq_round
from kvant_runtime.gptq.int4_rounding import Rounding, round_to_nearest


def random_weight(dtype: torch.dtype, rows: int = 48, cols: int = 256) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(rows, cols, generator=generator) * torch.logspace(-3, 1, cols)
    weight[0, :64] = 0.0  # all-zero groups get the eps scale
    weight[1, 5] = 1e4  # one outlier squeezes its group
    return weight.to(dtype)


def kernel_rtn(weight: torch.Tensor, group: int) -> tuple[np.ndarray, np.ndarray]:
    raw = weight.contiguous().view(torch.int16 if weight.element_size() == 2 else torch.int32).numpy()
    return quantize_pack(raw, DTYPE_NAMES[weight.dtype], group)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("hessian", ["identity", "diagonal"])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_with_a_diagonal_hessian_equals_the_rtn_kernel(dtype, group, hessian, act_order):
    weight = random_weight(dtype)
    cols = weight.shape[1]
    diagonal = torch.ones(cols) if hessian == "identity" else torch.rand(cols) + 0.1
    name = DTYPE_NAMES[dtype]
    rounding = Rounding.for_source(name, name, group)
    ours = gptq_round(weight.float(), torch.diag(diagonal), rounding, damp=0.01, act_order=act_order)
    packed, scale = kernel_rtn(weight, group)
    assert np.array_equal(ours.packed(), packed)
    assert np.array_equal(
        ours.scale.view(torch.int16 if dtype != torch.float32 else torch.int32).numpy(),
        scale.view(np.int16 if dtype != torch.float32 else np.int32),
    )
    assert torch.equal(round_to_nearest(weight.float(), rounding).codes, ours.codes)


def test_dead_columns_are_rounded_like_rtn_and_pass_no_error():
    weight = random_weight(torch.bfloat16)
    rounding = Rounding.for_source("BF16", "BF16", 32)
    hessian = torch.zeros(256, 256)  # no calibration input reached any column
    ours = gptq_round(weight.float(), hessian, rounding, damp=0.01, act_order=True)
    assert np.array_equal(ours.packed(), kernel_rtn(weight, 32)[0])
