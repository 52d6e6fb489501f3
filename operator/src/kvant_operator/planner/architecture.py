"""Reads the shape the planner needs from a Hugging Face config.json.

Two attention families matter for KV sizing: GQA/MHA (K and V per KV head) and MLA (one compressed
latent plus a shared RoPE key per token). A config is accepted only for a known architecture with
every field the planner reads, so a wrong shape is never planned silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

GQA_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "glm4_moe"})
MLA_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})
SUPPORTED = "Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, GLM-4.x MoE (GQA); DeepSeek-V2/V3, Kimi-K2 (MLA)"
GQA_FIELDS = ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size", "intermediate_size")
MLA_FIELDS = (*GQA_FIELDS, "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
MOE_FIELDS = {
    "qwen3_moe": ("num_experts|num_local_experts", "moe_intermediate_size"),
    "glm4_moe": ("n_routed_experts", "moe_intermediate_size"),
    "deepseek_v2": ("n_routed_experts", "moe_intermediate_size"),
    "deepseek_v3": ("n_routed_experts", "moe_intermediate_size"),
    "kimi_k2": ("n_routed_experts", "moe_intermediate_size"),
}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


class ConfigError(ValueError):
    """config.json cannot be planned; the message names the file, the field and what is supported."""


class Attention(StrEnum):
    GQA = "gqa"
    MLA = "mla"


@dataclass(frozen=True)
class MoeShape:
    num_experts: int
    intermediate_size: int
    shared_intermediate_size: int  # 0 when the model has no shared expert
    dense_layers: frozenset[int]  # layers with a dense MLP instead of experts
    experts_per_token: int = 1  # routed experts each token passes through (num_experts_per_tok)


@dataclass(frozen=True)
class ModelShape:
    """What the planner reads from config.json. head counts are of the whole model (before TP)."""

    model_type: str
    architecture: str
    attention: Attention
    num_layers: int
    hidden_size: int
    vocab_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    max_context: int | None
    tie_word_embeddings: bool
    attention_bias: bool
    qk_norm: bool
    moe: MoeShape | None
    # MLA only
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int | None = None
    # Block-FP8 source checkpoints (DeepSeek-V3 style): the block size of weight_scale_inv.
    fp8_block: tuple[int, int] | None = None


def load_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; pass a config.json or a checkpoint folder") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(config).__name__}")
    return config


def parse_shape(config: dict[str, Any], where: str = "config.json") -> ModelShape:
    model_type = str(config.get("model_type", ""))
    architecture = str((config.get("architectures") or ["?"])[0])
    if model_type in GQA_MODEL_TYPES:
        _require(config, GQA_FIELDS + MOE_FIELDS.get(model_type, ()), where, model_type)
        return _gqa(config, model_type, architecture)
    if model_type in MLA_MODEL_TYPES:
        _require(config, MLA_FIELDS + MOE_FIELDS[model_type], where, model_type)
        return _mla(config, model_type, architecture)
    raise ConfigError(
        f"{where}: architecture {architecture} (model_type {model_type or 'missing'!r}) is not supported; "
        f"supported: {SUPPORTED}. {_missing_for_families(config)}"
    )


def _missing_for_families(config: dict[str, Any]) -> str:
    gqa = [f for f in GQA_FIELDS if f not in config]
    mla = [f for f in MLA_FIELDS if f not in config]
    if not gqa:
        return "It has the GQA fields, but Kvant does not know its layer layout."
    return f"Missing fields: {', '.join(gqa)} (GQA); {', '.join(mla)} (MLA)."


def _first(config: dict[str, Any], field: str) -> Any:
    """The value of `field`; "a|b" takes whichever spelling the config uses (transformers renames some)."""
    return next((config[name] for name in field.split("|") if config.get(name) is not None), None)


def _require(config: dict[str, Any], fields: tuple[str, ...], where: str, model_type: str) -> None:
    missing = [f.replace("|", " or ") for f in fields if _first(config, f) is None]
    if missing:
        raise ConfigError(
            f"{where}: a {model_type} config needs {', '.join(missing)} to plan KV cache and weights"
        )


# Upper bounds far above any real model, so a hostile config fails with a message instead of a
# nonsensical plan or a loop over 10^12 layers.
_MAX_LAYERS, _MAX_SIZE = 10_000, 1 << 24


def _whole(config: dict[str, Any], field: str, *, minimum: int = 1, maximum: int = _MAX_SIZE) -> int:
    """`config[field]` as a whole number in [minimum, maximum]; the error names the field."""
    value = config.get(field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ConfigError(
            f"config.json: {field} must be a whole number in [{minimum}, {maximum}], got {value!r}"
        )
    return value


def _common(config: dict[str, Any], model_type: str, architecture: str) -> dict[str, Any]:
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "bfloat16")
    return {
        "model_type": model_type,
        "architecture": architecture,
        "num_layers": _whole(config, "num_hidden_layers", maximum=_MAX_LAYERS),
        "hidden_size": _whole(config, "hidden_size"),
        "vocab_size": _whole(config, "vocab_size"),
        "intermediate_size": _whole(config, "intermediate_size"),
        "num_attention_heads": _whole(config, "num_attention_heads"),
        "dtype_bytes": DTYPE_BYTES.get(dtype, 2),
        "max_context": config.get("max_position_embeddings"),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "moe": _moe(config, model_type),
        "fp8_block": _fp8_block(config),
    }


def _gqa(config: dict[str, Any], model_type: str, architecture: str) -> ModelShape:
    common = _common(config, model_type, architecture)
    heads = common["num_attention_heads"]
    kv_heads = _whole(config, "num_key_value_heads") if config.get("num_key_value_heads") else heads
    if heads % kv_heads:
        raise ConfigError(
            f"config.json: num_attention_heads ({heads}) must be a multiple of "
            f"num_key_value_heads ({kv_heads})"
        )
    if config.get("head_dim"):
        head_dim = _whole(config, "head_dim")
    elif common["hidden_size"] % heads:
        raise ConfigError(
            f"config.json: without head_dim, hidden_size ({common['hidden_size']}) must be a multiple of "
            f"num_attention_heads ({heads})"
        )
    else:
        head_dim = common["hidden_size"] // heads
    return ModelShape(
        **common,
        attention=Attention.GQA,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        attention_bias=model_type == "qwen2" or bool(config.get("attention_bias", False)),
        qk_norm=model_type in ("qwen3", "qwen3_moe") or bool(config.get("use_qk_norm", False)),
    )


def _mla(config: dict[str, Any], model_type: str, architecture: str) -> ModelShape:
    common = _common(config, model_type, architecture)
    rope, nope = _whole(config, "qk_rope_head_dim"), _whole(config, "qk_nope_head_dim")
    return ModelShape(
        **common,
        attention=Attention.MLA,
        num_kv_heads=common["num_attention_heads"],
        head_dim=nope + rope,
        attention_bias=False,
        qk_norm=False,
        kv_lora_rank=_whole(config, "kv_lora_rank"),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        v_head_dim=_whole(config, "v_head_dim"),
        q_lora_rank=_whole(config, "q_lora_rank") if config.get("q_lora_rank") else None,
    )


def _moe(config: dict[str, Any], model_type: str) -> MoeShape | None:
    if model_type not in MOE_FIELDS:
        return None
    layers = int(config["num_hidden_layers"])
    if model_type == "qwen3_moe":
        step = int(config.get("decoder_sparse_step") or 1)
        mlp_only = {int(i) for i in config.get("mlp_only_layers") or []}
        dense = frozenset(i for i in range(layers) if i in mlp_only or (i + 1) % step != 0)
        experts = int(_first(config, "num_experts|num_local_experts"))
        return MoeShape(experts, int(config["moe_intermediate_size"]), 0, dense, _per_token(config))
    first_dense = int(config.get("first_k_dense_replace") or 0)
    freq = int(config.get("moe_layer_freq") or 1)
    dense = frozenset(i for i in range(layers) if i < first_dense or i % freq != 0)
    shared = int(config.get("n_shared_experts") or 0) * int(config["moe_intermediate_size"])
    experts = int(config["n_routed_experts"])
    return MoeShape(experts, int(config["moe_intermediate_size"]), shared, dense, _per_token(config))


def _per_token(config: dict[str, Any]) -> int:
    return int(config.get("num_experts_per_tok") or 1)


def _fp8_block(config: dict[str, Any]) -> tuple[int, int] | None:
    quant = config.get("quantization_config") or {}
    if quant.get("quant_method") != "fp8":
        return None
    block = quant.get("weight_block_size") or [128, 128]
    return int(block[0]), int(block[1])
