"""A stand-in for transformers' KV cache that sees exactly what SGLang's cache would store.

A decoder layer's attention hands its cache `update(first, second, layer_idx)` and attends over
what comes back. For GQA the pair is the post-RoPE K and V; for MLA (DeepSeek-V3 in transformers 5)
it is the latent itself, the normalised compressed KV and the roped k_pe, the same row SGLang keeps.
The tap records their absmax per layer and, given scales, returns them as an FP8 cache of its format
(e4m3 or e5m2) would give them back, so attention runs on quantize-dequantized K/V. Given the widths
SGLang's cache stores (`KVLayout.widths`), it refuses tensors of other widths: transformers'
attention for that model then caches something else than SGLang's, and its absmax would give wrong
scales.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from kvant_contracts.kv_dtypes import DEFAULT_KV_DTYPE
from kvant_kernels.kv_scales import LayerAbsmax, fake_quantize_kv
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.kv_layout import CacheKind


class KVTap:
    def __init__(
        self,
        kind: CacheKind,
        scales: Mapping[int, tuple[float, float]] | None = None,
        widths: tuple[int, int] | None = None,
        kv_dtype: str = DEFAULT_KV_DTYPE,
    ) -> None:
        self.kind = kind
        self.scales = scales
        self.kv_dtype = kv_dtype  # the format `scales` quantize into; absmax alone needs none
        self.widths = widths
        self.absmax = LayerAbsmax()

    def update(
        self, first: torch.Tensor, second: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.widths is not None and (first.shape[-1], second.shape[-1]) != self.widths:
            raise CheckpointError(
                f"layer {layer_idx}: transformers' attention caches tensors {first.shape[-1]} and "
                f"{second.shape[-1]} wide, SGLang's {self.kind.upper()} cache {self.widths[0]} and "
                f"{self.widths[1]}; the two cache different things, so Kvant cannot calibrate this model"
            )
        if self.kind == "mla":
            # One latent row [compressed KV | k_pe] per token: K and V are the same tensor.
            self.absmax.observe(layer_idx, first, first)
            self.absmax.observe(layer_idx, second, second)
        else:
            self.absmax.observe(layer_idx, first, second)
        if self.scales is None:
            return first, second
        k_scale, v_scale = self.scales[layer_idx]
        if self.kind == "mla":
            v_scale = k_scale  # SGLang's attn_mqa reads the whole latent row with k_scale
        return fake_quantize_kv(first, k_scale, self.kv_dtype), fake_quantize_kv(
            second, v_scale, self.kv_dtype
        )
