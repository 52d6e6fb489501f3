"""KV scales carry one binade of headroom: the calibrated absmax and up to twice it stay exact in
range, beyond that values saturate; an all-zero tensor gets scale 1.0. The served format's range sets
the scale: 448 for e4m3, 57344 for e5m2, and each is emulated as itself."""

import pytest
import torch

from kvant_kernels.fp8 import KV_FP8_FORMATS
from kvant_kernels.kv_scales import SAFETY_MARGIN, LayerAbsmax, fake_quantize_kv, kv_cache_scale

LARGEST = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}


@pytest.mark.parametrize("kv_dtype", list(KV_FP8_FORMATS))
def test_scale_is_absmax_times_margin_over_the_formats_largest_value(kv_dtype):
    assert kv_cache_scale(3.5, kv_dtype) == pytest.approx(3.5 * SAFETY_MARGIN / LARGEST[kv_dtype])
    assert kv_cache_scale(0.0, kv_dtype) == 1.0


@pytest.mark.parametrize("kv_dtype", list(KV_FP8_FORMATS))
def test_values_up_to_the_margin_round_trip_and_beyond_it_saturate(kv_dtype):
    absmax = 5.0
    scale = kv_cache_scale(absmax, kv_dtype)
    inside = torch.tensor([absmax, -absmax, absmax * SAFETY_MARGIN])
    assert torch.allclose(fake_quantize_kv(inside, scale, kv_dtype), inside, rtol=2**-2)
    beyond = fake_quantize_kv(torch.tensor([absmax * SAFETY_MARGIN * 4]), scale, kv_dtype)
    assert beyond.item() == pytest.approx(LARGEST[kv_dtype] * scale)


def test_e5m2_is_emulated_with_its_own_two_mantissa_bits():
    # 1.125 needs three mantissa bits: e4m3 keeps it, e5m2 rounds it (to 1.0, half to even).
    value = torch.tensor([1.125])
    assert fake_quantize_kv(value, 1.0, "fp8_e4m3").item() == 1.125
    assert fake_quantize_kv(value, 1.0, "fp8_e5m2").item() == 1.0


def test_an_unknown_format_is_refused_by_name():
    with pytest.raises(ValueError, match="fp8_e3m4"):
        kv_cache_scale(1.0, "fp8_e3m4")


def test_margin_below_one_is_refused():
    with pytest.raises(ValueError, match="below 1"):
        kv_cache_scale(1.0, "fp8_e4m3", margin=0.5)


def test_per_layer_reduction_keeps_the_largest_magnitude_per_tensor():
    absmax = LayerAbsmax()
    absmax.observe(0, torch.tensor([1.0, -4.0]), torch.tensor([2.0]))
    absmax.observe(0, torch.tensor([3.0]), torch.tensor([-7.0]))
    absmax.observe(1, torch.tensor([0.5]), torch.tensor([0.25]))
    assert (absmax.k(0), absmax.v(0), absmax.k(1), absmax.v(1)) == (4.0, 7.0, 0.5, 0.25)
    assert absmax.layers() == [0, 1]
    with pytest.raises(ValueError, match="not finite"):
        absmax.observe(2, torch.tensor([float("nan")]), torch.tensor([1.0]))
