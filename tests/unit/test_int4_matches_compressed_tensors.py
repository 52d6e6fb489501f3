"""The INT4 kernel is bit-exact with compressed-tensors' own quantizer and pack-quantized compressor."""

import pytest
import torch
from compressed_tensors.compressors.pack_quantized import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.lifecycle.forward import quantize
from compressed_tensors.quantization.utils.helpers import calculate_qparams

from kvant_kernels.tensors import compress_int4, decompress_int4, fake_quantize_int4, unpack_int4


def ct_args(group_size: int) -> QuantizationArgs:
    return QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=group_size)


def ct_compress(weight: torch.Tensor, group_size: int) -> dict[str, torch.Tensor]:
    """compressed-tensors' own path: minmax observer → calculate_qparams → PackedQuantizationCompressor."""
    args = ct_args(group_size)
    groups = weight.unflatten(-1, (-1, group_size))
    scale, zero_point = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
    state = {"weight": weight, "weight_scale": scale, "weight_zero_point": zero_point}
    return PackedQuantizationCompressor.compress(state, QuantizationScheme(targets=["Linear"], weights=args))


def awkward_weight(dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    weight = torch.randn(96, 256) * 0.03
    weight[0, :128] = 0  # an all-zero group: scale falls back to the dtype's eps
    weight[1] = torch.linspace(-1, 1, 256)  # exact ties at .5 exercise round-half-to-even
    weight[2, 5] = 40.0  # one outlier dominates its group
    weight[3, :128] *= 1e-4  # fp16: scales below its normal range (subnormal scales)
    weight[4, :128] *= 1e-6  # fp16: scales that round to zero, so eps
    return weight.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_compress_equals_compressed_tensors_bit_for_bit(dtype, group_size):
    weight = awkward_weight(dtype)
    theirs = ct_compress(weight, group_size)
    ours = compress_int4(weight, group_size)

    assert torch.equal(ours.weight_packed, theirs["weight_packed"])
    assert torch.equal(ours.weight_scale, theirs["weight_scale"])
    assert ours.weight_scale.dtype == dtype
    assert torch.equal(ours.weight_shape, theirs["weight_shape"])
    scheme = QuantizationScheme(targets=["Linear"], weights=ct_args(group_size))
    their_weight = PackedQuantizationCompressor.decompress(theirs, scheme)["weight"]
    assert torch.equal(decompress_int4(ours), their_weight)
    assert torch.equal(fake_quantize_int4(weight, group_size), their_weight)


def test_scale_is_absmax_over_7_5():
    weight = torch.tensor([[0.75, -1.5, 0.0, 0.3] * 8], dtype=torch.float32)
    assert compress_int4(weight, 32).weight_scale.item() == pytest.approx(1.5 / 7.5)


def weight_with_codes(codes: torch.Tensor) -> torch.Tensor:
    """A weight whose INT4 codes are `codes` (scale 1.0): each 32-group must start with -8 or 7.

    Code -8 is written as -7.5 (rounds half to even to -8) and a group's first element as ±7.5,
    so every group's absmax is exactly 7.5.
    """
    assert torch.all((codes[:, ::32] == -8) | (codes[:, ::32] == 7))
    weight = torch.where(codes == -8, -7.5, codes.float())
    weight[:, ::32] = torch.where(codes[:, ::32] < 0, -7.5, 7.5)  # 7.5 clamps to 7
    return weight


def test_nibble_k_sits_at_bits_4_k_mod_8_of_word_k_div_8_as_q_plus_8():
    codes = torch.zeros(1, 32, dtype=torch.int8)
    codes[0, :16] = torch.tensor([-8, -7, 0, 1, 2, 3, 6, 7, 5, -1, 0, 0, 0, 4, 0, -3], dtype=torch.int8)
    packed = compress_int4(weight_with_codes(codes), 32)
    assert packed.weight_scale.item() == 1.0
    words = packed.weight_packed
    assert words.shape == (1, 4)
    for k, q in enumerate(codes[0].tolist()):
        word = int(words[0, k // 8]) & 0xFFFFFFFF
        assert (word >> (4 * (k % 8))) & 0xF == q + 8
    assert torch.equal(unpack_int4(words, 32), codes)


def test_fp32_weight_with_bf16_scale_equals_compressed_tensors_quantize_with_that_scale():
    # FP8-block sources are quantized from fp32 values against the bf16 scale that is stored (one rounding
    # of the weight). compressed-tensors would keep an fp32 scale for an fp32 weight; given our scale, its
    # quantizer produces exactly our codes.
    weight = awkward_weight(torch.float32)
    ours = compress_int4(weight, 64, scale_dtype=torch.bfloat16)
    assert ours.weight_scale.dtype == torch.bfloat16
    codes = quantize(
        weight, ours.weight_scale, torch.zeros_like(ours.weight_scale), ct_args(64), dtype=torch.int8
    )
    assert torch.equal(unpack_int4(ours.weight_packed, 256), codes)
    expected_scale = (weight.unflatten(-1, (-1, 64)).abs().amax(-1) / 7.5).to(torch.bfloat16)
    expected_scale[expected_scale == 0] = torch.finfo(torch.bfloat16).eps
    assert torch.equal(ours.weight_scale, expected_scale)


def test_unpack_inverts_pack_for_every_code():
    codes = torch.randint(-8, 8, (64, 512), generator=torch.Generator().manual_seed(3), dtype=torch.int8)
    codes[:, ::32] = torch.where(codes[:, ::32] < 0, -8, 7)
    assert torch.equal(unpack_int4(compress_int4(weight_with_codes(codes), 32).weight_packed, 512), codes)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("seed", range(4))
def test_random_weights_of_every_magnitude_equal_compressed_tensors(dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    magnitude = 10.0 ** torch.randint(-7, 2, (256, 1), generator=generator)
    weight = (torch.randn(256, 1024, generator=generator) * magnitude).to(dtype)
    theirs = ct_compress(weight, 64)
    ours = compress_int4(weight, 64)
    assert torch.equal(ours.weight_packed, theirs["weight_packed"])
    assert torch.equal(ours.weight_scale, theirs["weight_scale"])


def test_indivisible_input_dimension_is_rejected_with_shape_and_group():
    with pytest.raises(ValueError, match=r"input dimension 96 .* not divisible by group size 64"):
        compress_int4(torch.zeros(4, 96), 64)
