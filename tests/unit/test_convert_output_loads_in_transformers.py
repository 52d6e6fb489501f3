"""The INT4 output loads with transformers on CPU, and its logits equal a quantize-dequantize reference.

The reference is the source model with each targeted weight replaced by compressed-tensors' own
fake-quantization, so equality proves the whole path: selection, kernel, layout and config.
"""

import pytest
import torch
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from transformers import AutoModelForCausalLM

from kvant_runtime.convert.recipe import Recipe
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert

GROUP = 32


def ct_fake_quantize(weight: torch.Tensor) -> torch.Tensor:
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=GROUP)
    groups = weight.unflatten(-1, (-1, GROUP))
    scale, zero_point = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
    return fake_quantize(weight, scale, zero_point, args)


def quantize_dequantize_reference(source, targets: str) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    recipe = Recipe(group_size=GROUP, targets=targets)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and recipe.rule.quantizes(
            f"{name}.weight", tuple(module.weight.shape)
        ):
            module.weight.data = ct_fake_quantize(module.weight.data)
        # transformers fuses MoE experts into 3-D parameters; each expert slice is one checkpoint Linear
        # (gate_up_proj stacks gate and up by rows, and groups run along rows, so one call covers both).
        if hasattr(module, "gate_up_proj") and recipe.rule.quantizes(f"{name}.0.up_proj.weight", (1, GROUP)):
            for fused in (module.gate_up_proj, module.down_proj):
                for expert in range(fused.shape[0]):
                    fused.data[expert] = ct_fake_quantize(fused.data[expert])
    return model


@pytest.mark.parametrize(
    ("arch", "targets"), [("llama", "all-linear"), ("deepseek_v3", "all-linear"), ("deepseek_v3", "experts")]
)
def test_int4_logits_equal_quantize_dequantize_reference(tmp_path, arch, targets):
    source = tiny_checkpoint(arch)
    convert(source, tmp_path / "int4", group_size=GROUP, targets=targets)

    int4 = AutoModelForCausalLM.from_pretrained(tmp_path / "int4", dtype=torch.bfloat16)
    reference = quantize_dequantize_reference(source, targets)
    plain = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    tokens = torch.arange(3, 60).unsqueeze(0)
    with torch.no_grad():
        logits = int4(tokens).logits
        assert torch.equal(logits, reference(tokens).logits)
        assert not torch.equal(logits, plain(tokens).logits), "quantization must change something"


def test_fp8_block_source_output_loads_and_runs(tmp_path):
    convert(tiny_checkpoint("deepseek_v3", "fp8-block"), tmp_path / "int4", group_size=GROUP)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "int4", dtype=torch.bfloat16)
    with torch.no_grad():
        logits = model(torch.arange(3, 20).unsqueeze(0)).logits
    assert torch.isfinite(logits).all()
