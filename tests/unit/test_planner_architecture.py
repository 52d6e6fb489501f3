"""config.json parsing: supported families, rejected ones, and inventories that match real checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from kvant_operator.planner.architecture import Attention, ConfigError, parse_shape
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.synthesize import synthesize
from tests.unit.planner_configs import deepseek_v3, llama_3_1_70b

COMMON = {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3}
GQA = {**COMMON, "num_attention_heads": 4, "num_key_value_heads": 2}
MLA = {
    **COMMON,
    "num_attention_heads": 4,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "moe_intermediate_size": 32,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
}
TINY: dict[str, dict[str, Any]] = {
    "LlamaConfig": GQA,
    "MistralConfig": {**GQA, "head_dim": 16},
    "Qwen2Config": GQA,
    "Qwen3Config": {**GQA, "head_dim": 24},
    "Qwen3MoeConfig": {
        **GQA,
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "decoder_sparse_step": 2,
    },
    "Glm4MoeConfig": {
        **GQA,
        "head_dim": 16,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "moe_intermediate_size": 32,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
    },
    "DeepseekV2Config": {**MLA, "q_lora_rank": None},
    "DeepseekV3Config": {**MLA, "q_lora_rank": 24},
}


def save_tiny(config_class: str, overrides: dict[str, Any], folder: Path) -> Path:
    """A real checkpoint: transformers builds the model and writes it as SGLang would load it."""
    config = getattr(transformers, config_class)(**overrides, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.to(torch.bfloat16)
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("config_class", TINY)
def test_config_alone_predicts_the_real_checkpoint_inventory(config_class: str, tmp_path: Path):
    folder = save_tiny(config_class, TINY[config_class], tmp_path / config_class)
    real = load_checkpoint(folder)
    predicted = load_checkpoint(folder / "config.json")
    assert (real.inventory.origin, predicted.inventory.origin) == ("safetensors", "config.json")
    real_tensors = {t.name: (t.dtype, t.shape) for t in real.inventory.tensors}
    predicted_tensors = {t.name: (t.dtype, t.shape) for t in predicted.inventory.tensors}
    # Routing biases (e_score_correction_bias) are a few bytes the planner may leave out; nothing else.
    extra_real = {
        n for n in real_tensors.keys() - predicted_tensors.keys() if not n.endswith("correction_bias")
    }
    assert extra_real == set()
    assert predicted_tensors.keys() <= real_tensors.keys()
    assert {n: real_tensors[n] for n in predicted_tensors} == predicted_tensors


def test_mla_and_gqa_shapes():
    llama, dsv3 = parse_shape(llama_3_1_70b()), parse_shape(deepseek_v3())
    assert (llama.attention, llama.num_kv_heads, llama.head_dim, llama.num_layers) == (
        Attention.GQA,
        8,
        128,
        80,
    )
    assert (dsv3.attention, dsv3.kv_lora_rank, dsv3.qk_rope_head_dim) == (Attention.MLA, 512, 64)
    assert dsv3.moe is not None and dsv3.moe.dense_layers == frozenset({0, 1, 2})
    assert dsv3.fp8_block == (128, 128)


def test_kimi_k2_reads_as_mla():
    shape = parse_shape(
        {**deepseek_v3(), "model_type": "kimi_k2", "n_routed_experts": 384, "num_attention_heads": 64}
    )
    assert shape.attention is Attention.MLA and shape.moe is not None and shape.moe.num_experts == 384


def test_deepseek_v3_fp8_inventory_is_block_quantized():
    inventory = synthesize(parse_shape(deepseek_v3()))
    by_name = {t.name: t for t in inventory.tensors}
    expert = "model.layers.3.mlp.experts.255.down_proj"
    assert by_name[f"{expert}.weight"].dtype == "F8_E4M3"
    assert by_name[f"{expert}.weight_scale_inv"].shape == (7168 // 128, 2048 // 128)
    assert by_name["model.layers.3.mlp.gate.weight"].dtype == "BF16"
    # 671B parameters less the 14B-parameter MTP module (not synthesized), almost all one FP8 byte each.
    assert 0.65e12 < inventory.nbytes < 0.69e12


def test_unknown_architecture_is_rejected_naming_the_missing_fields():
    mamba = {
        "architectures": ["MambaForCausalLM"],
        "model_type": "mamba",
        "hidden_size": 768,
        "vocab_size": 50280,
    }
    with pytest.raises(ConfigError) as caught:
        parse_shape(mamba, "mamba/config.json")
    message = str(caught.value)
    assert "mamba/config.json" in message and "MambaForCausalLM" in message
    assert "num_attention_heads" in message and "kv_lora_rank" in message and "Llama" in message


def test_known_architecture_missing_a_field_is_rejected_naming_it():
    config = deepseek_v3()
    del config["kv_lora_rank"]
    with pytest.raises(ConfigError, match=r"kv_lora_rank"):
        parse_shape(config)


def test_already_quantized_config_alone_is_refused(tmp_path: Path):
    config = {**llama_3_1_70b(), "quantization_config": {"quant_method": "compressed-tensors"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="pass the checkpoint folder"):
        load_checkpoint(path)
