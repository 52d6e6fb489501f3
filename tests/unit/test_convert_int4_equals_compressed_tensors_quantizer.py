"""Every converted weight decompresses (with compressed-tensors) to exactly what its own quantizer gives."""

import json

import pytest
import torch
from compressed_tensors.compressors.pack_quantized import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme
from compressed_tensors.quantization.lifecycle.forward import fake_quantize, quantize
from compressed_tensors.quantization.utils.helpers import calculate_qparams

from kvant_kernels.tensors import dequantize_fp8_block
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert, quantized_modules, tensors


def scheme_of(output) -> QuantizationScheme:
    config = QuantizationConfig.model_validate(
        json.loads((output / "config.json").read_text())["quantization_config"]
    )
    assert config.format == "pack-quantized"
    return config.config_groups["group_0"]


def decompress(output, module: str, scheme: QuantizationScheme) -> torch.Tensor:
    out = tensors(output)
    state = {key: out[f"{module}.{key}"] for key in ("weight_packed", "weight_scale", "weight_shape")}
    return PackedQuantizationCompressor.decompress(state, scheme)["weight"]


@pytest.mark.parametrize(("arch", "group_size"), [("llama", 128), ("deepseek_v3", 64)])
def test_dense_source_matches_compressed_tensors_bit_for_bit(tmp_path, arch, group_size):
    source = tiny_checkpoint(arch)
    convert(source, tmp_path / "out", group_size=group_size)
    scheme, src, out = scheme_of(tmp_path / "out"), tensors(source), tensors(tmp_path / "out")
    modules = quantized_modules(tmp_path / "out")
    assert modules
    for module in modules:
        weight = src[f"{module}.weight"]
        groups = weight.unflatten(-1, (-1, group_size))
        scale, zero_point = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights)
        theirs = PackedQuantizationCompressor.compress(
            {"weight": weight, "weight_scale": scale, "weight_zero_point": zero_point}, scheme
        )
        assert torch.equal(out[f"{module}.weight_packed"], theirs["weight_packed"]), module
        assert torch.equal(out[f"{module}.weight_scale"], theirs["weight_scale"]), module
        assert torch.equal(
            decompress(tmp_path / "out", module, scheme),
            fake_quantize(weight, scale, zero_point, scheme.weights),
        )


def test_fp8_block_source_is_quantized_once_from_fp32_values(tmp_path):
    source = tiny_checkpoint("deepseek_v3", "fp8-block")
    convert(source, tmp_path / "out", group_size=32, targets="experts")
    scheme, src, out = scheme_of(tmp_path / "out"), tensors(source), tensors(tmp_path / "out")
    for module in quantized_modules(tmp_path / "out"):
        exact = dequantize_fp8_block(src[f"{module}.weight"], src[f"{module}.weight_scale_inv"])
        scale = out[f"{module}.weight_scale"]
        assert scale.dtype == torch.bfloat16
        expected_scale = (exact.unflatten(-1, (-1, 32)).abs().amax(-1) / 7.5).to(torch.bfloat16)
        assert torch.equal(scale, expected_scale)
        # compressed-tensors' quantizer on the fp32 values with the stored scale gives the same codes
        codes = quantize(exact, scale, torch.zeros_like(scale), scheme.weights, dtype=torch.int8)
        expected = (codes.to(torch.bfloat16).unflatten(-1, (-1, 32)) * scale.unsqueeze(-1)).flatten(-2)
        assert torch.equal(decompress(tmp_path / "out", module, scheme), expected)
    # FP8 projections that are not targets become bf16, dequantized once from the same fp32 values
    attention = "model.layers.0.self_attn.kv_a_proj_with_mqa"
    assert out[f"{attention}.weight"].dtype == torch.bfloat16
    assert torch.equal(
        out[f"{attention}.weight"],
        dequantize_fp8_block(src[f"{attention}.weight"], src[f"{attention}.weight_scale_inv"]).to(
            torch.bfloat16
        ),
    )
    assert not any(name.endswith("weight_scale_inv") for name in out)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"  # the FP8 config is replaced
