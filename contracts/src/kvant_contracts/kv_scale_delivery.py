"""Whether, and by which paths, SGLang loads calibrated FP8 KV-cache scales for an architecture.

One rule for both sides: the operator refuses `scales: calibrate` at plan time when nothing would
load the scales (FP8 KV would run at scale 1.0, and nobody would be told), and says which path is
in use in the `KVScales` condition; `kvant calibrate` writes exactly these paths. It reads the table
generated from SGLang's source (`kv_scale_paths.py`, docs/kv-scale-paths.md):
- remap: `model.layers.N.self_attn.k_scale`, mapped by `maybe_remap_kv_scale_name` onto the
  RadixAttention at `self_attn.attn`;
- exact: the RadixAttention's own parameter, `model.layers.N.<attention>.k_scale`;
- json: a `--quantization-param-path` file; in SGLang 0.5.23 every model that reads it also takes a
  tensor path, so it is written beside the tensors, never alone. SGLang reads it only for an e4m3
  cache (`load_kv_cache_scales`), and its schema asserts `float8_e4m3fn`, so an e5m2 cache gets its
  scales from the tensors alone: their loader (`BaseKVCacheMethod`) is the same for both formats.
Caches that are not plain GQA/MHA or DeepSeek MLA (state-space or linear-attention layers) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvant_contracts.kv_dtypes import DEFAULT_KV_DTYPE, KvCacheDtype
from kvant_contracts.kv_scale_paths import KV_SCALE_PATHS, SGLANG_VERSION, ScalePaths

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
_INSTEAD = "use a bf16 KV cache, or kvCache.scales: unit explicitly"
# The --kv-cache-dtype values for which SGLang reads a --quantization-param-path JSON.
JSON_SCALE_DTYPES = (KvCacheDtype.FP8_E4M3.value,)


class Unloadable(ValueError):
    """No path of SGLang's loads calibrated scales for this architecture; the message says why."""


@dataclass(frozen=True)
class Delivery:
    architecture: str
    kind: CacheKind
    paths: tuple[ScalePath, ...]  # what calibration writes, tensor paths first
    attention: str  # the RadixAttention's path under `model.layers.N`


def delivery(architecture: str, kv_dtype: str = DEFAULT_KV_DTYPE) -> Delivery:
    """How SGLang loads this architecture's scales into a `kv_dtype` cache, or Unloadable naming it and
    the SGLang version."""
    entry = KV_SCALE_PATHS.get(architecture)
    if entry is None:
        raise Unloadable(
            f"architecture {architecture!r}: SGLang {SGLANG_VERSION} serves no architecture of that name, "
            f"so Kvant cannot tell where it would read KV-cache scales (docs/kv-scale-paths.md lists the "
            f"{len(KV_SCALE_PATHS)} it serves)"
        )
    if entry.cache not in ("gqa", "mla"):
        raise Unloadable(
            f"{architecture}: in SGLang {SGLANG_VERSION} {_CACHES[entry.cache]}; Kvant calibrates FP8 "
            f"KV-cache scales for plain GQA/MHA and DeepSeek-MLA caches only ({_INSTEAD})"
        )
    paths: list[ScalePath] = []
    if entry.remap and entry.attention == REMAPPED_ATTENTION:
        paths.append("remap")
    if entry.exact and entry.attention:
        paths.append("exact")
    if not paths:
        raise Unloadable(
            f"{architecture}: Kvant knows no KV-cache scale tensor name that SGLang {SGLANG_VERSION} loads "
            f"for it: {_why_no_names(entry)}; FP8 KV would run at scale 1.0 ({_INSTEAD})"
        )
    if entry.json and kv_dtype in JSON_SCALE_DTYPES:
        paths.append("json")
    return Delivery(architecture, "mla" if entry.cache == "mla" else "gqa", tuple(paths), entry.attention)


def describe(found: Delivery) -> str:
    """The paths in words, for the KVScales condition."""
    words = {
        "remap": f"tensors named model.layers.N.self_attn.k_scale (remapped to {REMAPPED_ATTENTION})",
        "exact": f"tensors under the attention's own names (model.layers.N.{found.attention}.k_scale)",
        "json": "a --quantization-param-path JSON (written too; the tensors are what loads)",
    }
    return f"SGLang {SGLANG_VERSION} loads {found.architecture}'s scales as " + "; ".join(
        words[p] for p in found.paths
    )


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
