"""Where SGLang reads FP8 KV-cache scales for an architecture, and what its KV cache holds.

`kv_scale_paths.KV_SCALE_PATHS` (generated from SGLang's source, see docs/kv-scale-paths.md) says,
per architecture, which paths its loader takes:
- remap: `model.layers.N.self_attn.k_scale` (compressed-tensors' own checkpoint name, as
  llm-compressor writes it), which `maybe_remap_kv_scale_name` maps to the parameter
  `...self_attn.attn.k_scale` of the layer's RadixAttention (e.g. Llama, Mistral, Qwen3, Gemma 2/3);
- exact: the RadixAttention's parameter itself, `model.layers.N.self_attn.attn.k_scale`, looked up by
  name (e.g. Qwen2, Qwen2/3-MoE, GLM-4, Mixtral), or `model.layers.N.self_attn.attn_mqa.k_scale` for
  DeepSeek's absorbed MLA attention (DeepSeek V2/V3, Kimi K2). The parameters exist because the
  artifact's compressed-tensors `kv_cache_scheme` makes SGLang register them;
- json: a `--quantization-param-path` file (`load_kv_cache_scales`; e.g. Llama, Qwen2, Qwen3).
Kvant writes the tensors under every name path the loader takes (a remapping loader drops exact
names, so the two never both apply) and, where the model reads it, the JSON as well. An architecture
must take a tensor path: in SGLang 0.5.23 every model that reads the JSON also takes one.

What the cache holds decides what calibration measures. GQA/MHA: post-RoPE K and V per layer. MLA:
one latent row per token, `[kv_a_layernorm(compressed KV) (kv_lora_rank) | roped k_pe
(qk_rope_head_dim)]`, read by `attn_mqa`; the row is one tensor, so K and V share one scale
(v_scale = k_scale). Other caches (state-space or linear-attention layers, anything the table could
not place) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvant_runtime.calibrate.input_errors import ModelInputError
from kvant_runtime.calibrate.kv_scale_paths import KV_SCALE_PATHS, SGLANG_VERSION, ScalePaths

CacheKind = Literal["gqa", "mla"]
ScalePath = Literal["remap", "exact", "json"]
TENSOR_PATHS: tuple[ScalePath, ...] = ("remap", "exact")
# maybe_remap_kv_scale_name turns `<x>.k_scale` into `<x>.attn.k_scale`: it reaches the RadixAttention
# only where that sits at `self_attn.attn`, the attribute Kvant's remapped names start from.
REMAPPED_ATTENTION = "self_attn.attn"
_CACHES = {
    "hybrid": "some layers are state-space or linear-attention mixers, whose state is not a K/V cache",
    "other": "its attention is not a RadixAttention that Kvant could place",
}


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


def kv_layout(config: dict[str, Any]) -> KVLayout:
    architectures = config.get("architectures") or []
    architecture = str(architectures[0]) if architectures else ""
    entry = KV_SCALE_PATHS.get(architecture)
    if entry is None:
        raise ModelInputError(
            f"config.json architectures is {architectures!r}: SGLang {SGLANG_VERSION} serves no architecture "
            f"of that name, so Kvant cannot tell where it would read KV-cache scales (docs/kv-scale-paths.md "
            f"lists the {len(KV_SCALE_PATHS)} it serves)"
        )
    if entry.cache not in ("gqa", "mla"):
        raise ModelInputError(
            f"{architecture}: in SGLang {SGLANG_VERSION} {_CACHES[entry.cache]}; Kvant calibrates FP8 "
            f"KV-cache scales for plain GQA/MHA and DeepSeek-MLA caches only (use a bf16 KV cache, or "
            f"kvCache.scales: unit explicitly)"
        )
    kind: CacheKind = "mla" if entry.cache == "mla" else "gqa"
    paths = _paths(architecture, entry)
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int) or layers < 1:
        raise ModelInputError(f"config.json num_hidden_layers is {layers!r}; expected a positive integer")
    return KVLayout(architecture, kind, layers, paths, entry.attention, _widths(config, kind))


def _paths(architecture: str, entry: ScalePaths) -> tuple[ScalePath, ...]:
    paths: list[ScalePath] = []
    if entry.remap and entry.attention == REMAPPED_ATTENTION:
        paths.append("remap")
    if entry.exact and entry.attention:
        paths.append("exact")
    if not paths:
        raise ModelInputError(
            f"{architecture}: Kvant knows no KV-cache scale tensor name that SGLang {SGLANG_VERSION} loads "
            f"for it: {_why_no_names(entry)}; FP8 KV would run at scale 1.0 (use a bf16 KV cache, or "
            f"kvCache.scales: unit explicitly)"
        )
    if entry.json:
        paths.append("json")
    return tuple(paths)


def _why_no_names(entry: ScalePaths) -> str:
    where = f"at {entry.attention}" if entry.attention else "at a path the table does not derive"
    if entry.remap:
        remapped = f"`self_attn.k_scale` to `{REMAPPED_ATTENTION}.k_scale`"
        reason = f"its loader remaps {remapped}, but its RadixAttention is {where}"
    elif entry.exact:
        reason = f"its loader takes the RadixAttention's parameter names, but the RadixAttention is {where}"
    else:
        reason = "its loader takes neither remapped nor exact scale names"
    return reason + (" (it reads --quantization-param-path, but only besides tensors)" if entry.json else "")


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
