"""KV scales carry one binade of headroom: the calibrated absmax and up to twice it stay exact in
range, beyond that values saturate; an all-zero tensor gets scale 1.0."""

import pytest
import torch

from kvant_kernels.fp8 import FP8_E4M3_MAX
from kvant_kernels.kv_scales import SAFETY_MARGIN, LayerAbsmax, fake_quantize_kv, kv_cache_scale


def test_scale_is_absmax_times_margin_over_448():
    assert kv_cache_scale(3.5) == pytest.approx(3.5 * SAFETY_MARGIN / FP8_E4M3_MAX)
    assert kv_cache_scale(0.0) == 1.0


def test_values_up_to_the_margin_round_trip_and_beyond_it_saturate():
    absmax = 5.0
    scale = kv_cache_scale(absmax)
    inside = torch.tensor([absmax, -absmax, absmax * SAFETY_MARGIN])
    assert torch.allclose(fake_quantize_kv(inside, scale), inside, rtol=2**-3)
    beyond = fake_quantize_kv(torch.tensor([absmax * SAFETY_MARGIN * 4]), scale)
    assert beyond.item() == pytest.approx(FP8_E4M3_MAX * scale)


def test_margin_below_one_is_refused():
    with pytest.raises(ValueError, match="below 1"):
        kv_cache_scale(1.0, margin=0.5)


def test_per_layer_reduction_keeps_the_largest_magnitude_per_tensor():
    absmax = LayerAbsmax()
    absmax.observe(0, torch.tensor([1.0, -4.0]), torch.tensor([2.0]))
    absmax.observe(0, torch.tensor([3.0]), torch.tensor([-7.0]))
    absmax.observe(1, torch.tensor([0.5]), torch.tensor([0.25]))
    assert (absmax.k(0), absmax.v(0), absmax.k(1), absmax.v(1)) == (4.0, 7.0, 0.5, 0.25)
    assert absmax.layers() == [0, 1]
    with pytest.raises(ValueError, match="not finite"):
        absmax.observe(2, torch.tensor([float("nan")]), torch.tensor([1.0]))
