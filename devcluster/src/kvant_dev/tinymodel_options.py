"""The tiny checkpoints' architectures and dtypes, torch-free, so `kvant tiny-model --help` stays light."""

from __future__ import annotations

from typing import Literal

Arch = Literal["llama", "qwen2", "deepseek_v3"]
Dtype = Literal["bf16", "fp16", "fp32", "fp8-block"]
ARCHES: tuple[Arch, ...] = ("llama", "qwen2", "deepseek_v3")
DTYPES: tuple[Dtype, ...] = ("bf16", "fp16", "fp32", "fp8-block")
