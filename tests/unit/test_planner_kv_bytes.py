"""KV bytes per token per GPU: the worked numbers of GQA and MLA models."""

from __future__ import annotations

from typing import Any

import pytest

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.planner.architecture import parse_shape
from kvant_operator.planner.capacity import kv_bytes_per_token_per_gpu, kv_dtype_bytes
from tests.unit.planner_configs import deepseek_v3, llama_3_1_70b


def cell(config: dict[str, Any], tp: int, dtype: KvCacheDtype) -> int:
    shape = parse_shape(config)
    return kv_bytes_per_token_per_gpu(shape, tp, kv_dtype_bytes(dtype, shape.dtype_bytes))


def test_llama_70b_at_tp8():
    # 8 KV heads / 8 ranks = 1 head per GPU: 1 x 2 (K and V) x 128 x 80 layers x bytes.
    assert cell(llama_3_1_70b(), 8, KvCacheDtype.BF16) == 40_960
    assert cell(llama_3_1_70b(), 8, KvCacheDtype.FP8_E4M3) == 20_480
    assert cell(llama_3_1_70b(), 8, KvCacheDtype.AUTO) == 40_960, "auto follows the model's bf16"


def test_gqa_heads_are_replicated_past_kv_head_count():
    assert cell(llama_3_1_70b(), 16, KvCacheDtype.BF16) == cell(llama_3_1_70b(), 8, KvCacheDtype.BF16)
    assert cell(llama_3_1_70b(), 4, KvCacheDtype.BF16) == 2 * cell(llama_3_1_70b(), 8, KvCacheDtype.BF16)


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_deepseek_v3_mla_is_the_same_at_any_tp(tp: int):
    # (512 latent + 64 rope) x 61 layers x bytes, on every rank.
    assert cell(deepseek_v3(), tp, KvCacheDtype.BF16) == 70_272
    assert cell(deepseek_v3(), tp, KvCacheDtype.FP8_E4M3) == 35_136
    assert cell(deepseek_v3(), tp, KvCacheDtype.FP8_E5M2) == 35_136
