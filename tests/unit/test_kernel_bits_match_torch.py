"""The torch-free float formats (bf16 bits, e4m3 table) agree with torch's own conversions."""

import numpy as np
import torch

from kvant_kernels.bits import bf16_bits, bf16_values, e4m3_values


def test_every_e4m3_code_decodes_as_torch_does():
    codes = torch.arange(256, dtype=torch.uint8)
    theirs = codes.view(torch.float8_e4m3fn).float().numpy()
    ours = e4m3_values(codes.numpy())
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert np.isnan(ours).sum() == 2  # 0x7F and 0xFF


def test_bf16_rounding_is_torchs_half_to_even():
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(100_000, generator=generator) * 10.0 ** torch.randint(-40, 38, (100_000,))
    ties = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 1e-40, -0.0, float("inf")])
    values = torch.cat([values, ties])
    theirs = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    ours = bf16_bits(values.numpy())
    assert np.array_equal(ours, theirs)
    assert np.array_equal(bf16_values(ours), values.to(torch.bfloat16).float().numpy())
