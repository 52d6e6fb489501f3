"""Tiny checkpoint folders (config.json only) for the launcher tests: GQA and MLA, bf16 and INT4."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GQA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
}
MLA_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "kv_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "n_routed_experts": 4,
    "vocab_size": 256,
}
INT4_QUANTIZATION = {"quant_method": "compressed-tensors", "format": "pack-quantized"}


def checkpoint(root: Path, arch: str, weights: str) -> Path:
    """A folder with the config.json of a GQA or MLA model in bf16 or INT4 (compressed-tensors)."""
    config: dict[str, Any] = dict(GQA_CONFIG if arch == "gqa" else MLA_CONFIG)
    if weights == "int4":
        config["quantization_config"] = INT4_QUANTIZATION
    folder = root / f"{arch}-{weights}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder
