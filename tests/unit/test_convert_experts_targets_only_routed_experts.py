"""--targets experts quantizes the MoE routed experts and nothing else."""

import json
import re

from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert, quantized_modules, tensors


def test_only_routed_experts_are_quantized(tmp_path):
    source = tiny_checkpoint("deepseek_v3")
    convert(source, tmp_path / "out", targets="experts", group_size=64)
    routed = {
        name.removesuffix(".weight")
        for name in tensors(source)
        if re.fullmatch(r"model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight", name)
    }
    assert len(routed) == 4 * 3
    assert quantized_modules(tmp_path / "out") == routed

    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    assert "model.layers.1.mlp.shared_experts.down_proj" in config["ignore"]
    assert "model.layers.1.self_attn.kv_b_proj" in config["ignore"]
    assert "model.layers.0.mlp.gate_proj" in config["ignore"]  # a dense (non-MoE) layer's MLP
    assert "model.layers.1.mlp.gate" in config["ignore"] and "lm_head" in config["ignore"]
    assert not any(module in config["ignore"] for module in routed)


def test_all_linear_still_keeps_router_gate_and_lm_head(tmp_path):
    convert(tiny_checkpoint("deepseek_v3"), tmp_path / "out", targets="all-linear", group_size=64)
    quantized = quantized_modules(tmp_path / "out")
    assert "model.layers.1.mlp.shared_experts.up_proj" in quantized
    assert "model.layers.1.self_attn.q_b_proj" in quantized
    assert not {"model.layers.1.mlp.gate", "lm_head", "model.embed_tokens"} & quantized
