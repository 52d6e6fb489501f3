"""What calibration needs of an architecture: where SGLang reads its FP8 KV-cache scales
(`kvant_contracts.kv_scale_delivery`, the rule the operator also plans with), and what its KV cache
holds, which decides what calibration measures.

GQA/MHA: post-RoPE K and V per layer. MLA: one latent row per token, `[kv_a_layernorm(compressed KV)
(kv_lora_rank) | roped k_pe (qk_rope_head_dim)]`, read by `attn_mqa`; the row is one tensor, so K and
V share one scale (v_scale = k_scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvant_contracts.kv_dtypes import DEFAULT_KV_DTYPE
from kvant_contracts.kv_scale_delivery import (
    REMAPPED_ATTENTION,
    TENSOR_PATHS,
    CacheKind,
    ScalePath,
    Unloadable,
    delivery,
)
from kvant_runtime.checkpoint.errors import CheckpointError

__all__ = ["REMAPPED_ATTENTION", "CacheKind", "KVLayout", "ScalePath", "kv_layout"]


@dataclass(frozen=True)
class KVLayout:
    architecture: str
    kind: CacheKind
    layers: int
    paths: tuple[ScalePath, ...]  # what calibration writes, tensor paths first
    attention: str  # the RadixAttention's path under `model.layers.N`
    widths: tuple[int, int] | None = None  # last dims of the two tensors the cache stores, if known

    def names(self, path: ScalePath, layer: int) -> tuple[str, str]:
        """(k_scale, v_scale) tensor names for decoder layer `layer` under a tensor path."""
        prefix = f"model.layers.{layer}.{'self_attn' if path == 'remap' else self.attention}"
        return f"{prefix}.k_scale", f"{prefix}.v_scale"

    def tensor_paths(self) -> tuple[ScalePath, ...]:
        return tuple(path for path in self.paths if path in TENSOR_PATHS)

    def scale_names(self, layer: int) -> tuple[str, str]:
        """(k_scale, v_scale) names of decoder layer `layer` under the first tensor path SGLang takes."""
        return self.names(self.tensor_paths()[0], layer)

    def all_scale_names(self) -> list[str]:
        return [
            name
            for path in self.tensor_paths()
            for layer in range(self.layers)
            for name in self.names(path, layer)
        ]


def kv_layout(config: dict[str, Any], kv_dtype: str = DEFAULT_KV_DTYPE) -> KVLayout:
    """The layout of `config`'s cache and the scale paths SGLang reads for a `kv_dtype` cache."""
    architectures = config.get("architectures") or []
    architecture = str(architectures[0]) if architectures else ""
    try:
        found = delivery(architecture, kv_dtype)
    except Unloadable as refused:
        raise CheckpointError(f"config.json architectures is {architectures!r}: {refused}") from None
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int) or layers < 1:
        raise CheckpointError(f"config.json num_hidden_layers is {layers!r}; expected a positive integer")
    return KVLayout(
        architecture, found.kind, layers, found.paths, found.attention, _widths(config, found.kind)
    )


def _widths(config: dict[str, Any], kind: CacheKind) -> tuple[int, int] | None:
    """The last dims of what the cache stores per layer: head_dim twice (GQA), or the latent's two
    parts (MLA); None when config.json lacks the numbers."""
    if kind == "mla":
        lora, rope = config.get("kv_lora_rank"), config.get("qk_rope_head_dim")
        return (lora, rope) if isinstance(lora, int) and isinstance(rope, int) else None
    head_dim = config.get("head_dim")
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if not isinstance(head_dim, int) and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        head_dim = hidden // heads
    if not isinstance(head_dim, int):
        return None
    v_head_dim = config.get("v_head_dim")
    return head_dim, v_head_dim if isinstance(v_head_dim, int) else head_dim
