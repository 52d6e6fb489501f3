"""On correlated inputs GPTQ's output error ||X W^T - X Ŵ^T|| is well below RTN's, with and without
act-order, and its codes stay INT4 with the RTN scale rule's shape."""

import pytest
import torch

from kvant_runtime.gptq.gptq_solver import gptq_round
from kvant_runtime.gptq.int4_rounding import Rounding, round_to_nearest


def correlated_inputs(tokens: int, cols: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    latent = torch.randn(tokens, cols // 4, generator=generator)
    mixing = torch.randn(cols // 4, cols, generator=generator)
    noise = 0.1 * torch.randn(tokens, cols, generator=generator)
    scales = torch.logspace(-1, 1, cols)[torch.randperm(cols, generator=generator)]  # uneven channels
    return (latent @ mixing + noise) * scales


def output_error(inputs: torch.Tensor, weight: torch.Tensor, rounded: torch.Tensor) -> float:
    return float(torch.linalg.norm(inputs @ (weight - rounded).T))


@pytest.mark.parametrize("act_order", [False, True])
@pytest.mark.parametrize("group", [32, 128])
def test_gptq_output_error_is_below_rtn(act_order, group):
    inputs = correlated_inputs(2048, 256)
    weight = torch.randn(64, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).float()
    hessian = 2 / inputs.shape[0] * inputs.T @ inputs
    rounding = Rounding.for_source("BF16", "BF16", group)

    gptq = gptq_round(weight, hessian, rounding, damp=0.01, act_order=act_order)
    rtn = round_to_nearest(weight, rounding)

    assert gptq.codes.dtype == torch.int8 and int(gptq.codes.min()) >= -8 and int(gptq.codes.max()) <= 7
    assert gptq.scale.shape == rtn.scale.shape == (64, 256 // group) and gptq.scale.dtype == torch.bfloat16
    gptq_error = output_error(inputs, weight, gptq.dequantized())
    rtn_error = output_error(inputs, weight, rtn.dequantized())
    assert gptq_error < 0.8 * rtn_error, (gptq_error, rtn_error)
