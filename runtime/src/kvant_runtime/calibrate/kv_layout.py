"""Where SGLang 0.5.23 reads FP8 KV-cache scales for each architecture, and what its cache holds.

GQA/MHA (`LlamaForCausalLM`, `MistralForCausalLM`, `Qwen3ForCausalLM`): the cache holds post-RoPE K
and V per layer. The loader passes `model.layers.N.self_attn.k_scale` through
`maybe_remap_kv_scale_name`, which maps it to the parameter `...self_attn.attn.k_scale` of the
layer's RadixAttention (compressed-tensors' own checkpoint name, as llm-compressor writes it).

MLA (`DeepseekV2ForCausalLM`, `DeepseekV3ForCausalLM`, also Kimi-K2): the cache holds one latent row
per token, `[kv_a_layernorm(compressed KV) (kv_lora_rank) | roped k_pe (qk_rope_head_dim)]`, read by
the absorbed attention `attn_mqa`. The DeepSeek loader looks names up in its parameters directly and
only rewrites `k_proj`/`v_proj` to `attn_mqa`, so `self_attn.k_scale` would be dropped with a
"not found" warning; the name must be `model.layers.N.self_attn.attn_mqa.k_scale`. The latent row
is one tensor, so K and V share one scale (v_scale = k_scale).

tests/unit/test_calibrate_scale_names_match_sglang_loader.py pins both against SGLang's source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvant_runtime.calibrate.input_errors import ModelInputError

CacheKind = Literal["gqa", "mla"]
GQA_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM")
MLA_ARCHITECTURES = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
_ATTENTION = {"gqa": "self_attn", "mla": "self_attn.attn_mqa"}


@dataclass(frozen=True)
class KVLayout:
    architecture: str
    kind: CacheKind
    layers: int

    def scale_names(self, layer: int) -> tuple[str, str]:
        """(k_scale, v_scale) tensor names for decoder layer `layer`, as SGLang's loader reads them."""
        prefix = f"model.layers.{layer}.{_ATTENTION[self.kind]}"
        return f"{prefix}.k_scale", f"{prefix}.v_scale"

    def all_scale_names(self) -> list[str]:
        return [name for layer in range(self.layers) for name in self.scale_names(layer)]


def kv_layout(config: dict[str, Any]) -> KVLayout:
    architectures = config.get("architectures") or []
    architecture = str(architectures[0]) if architectures else ""
    if architecture in GQA_ARCHITECTURES:
        kind: CacheKind = "gqa"
    elif architecture in MLA_ARCHITECTURES:
        kind = "mla"
    else:
        raise ModelInputError(
            f"config.json architectures is {architectures!r}; Kvant knows where SGLang reads KV-cache "
            f"scales for {', '.join(GQA_ARCHITECTURES + MLA_ARCHITECTURES)}"
        )
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int) or layers < 1:
        raise ModelInputError(f"config.json num_hidden_layers is {layers!r}; expected a positive integer")
    return KVLayout(architecture, kind, layers)
