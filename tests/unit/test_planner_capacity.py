"""KV tokens per replica, SGLang's default memory fraction, concurrency, and the not-fitting warning."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api.spec import WeightFormat
from kvant_operator.planner import PlanRequest, load_checkpoint, make_plan
from kvant_operator.planner.capacity import (
    GIB,
    kv_tokens_per_gpu,
    max_concurrency,
    sglang_default_mem_fraction_static,
)
from tests.unit.planner_configs import deepseek_v3, llama_3_1_70b, write_config


def test_kv_tokens_worked_example():
    # 80 GiB GPU, 1 GiB runtime reserve: 79 GiB x 0.85 = 67.15 GiB; minus 20 GiB of weights = 47.15 GiB;
    # at 64 KiB per token that is 47.15 x 16384 = 772,505.6 tokens.
    assert kv_tokens_per_gpu(80 * GIB, 20 * GIB, 0.85, 65_536, 1) == 772_505
    assert kv_tokens_per_gpu(80 * GIB, 20 * GIB, 0.85, 65_536, 64) == 772_480  # 12,070 whole pages
    assert kv_tokens_per_gpu(80 * GIB, 70 * GIB, 0.85, 65_536, 1) == 0


def test_sglang_default_mem_fraction_static():
    # H100 80 GiB, TP1: reserve 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 = 13,440 MiB of 81,920.
    assert sglang_default_mem_fraction_static(80, 1) == 0.836
    # H200 141 GiB, TP8: reserve 512 + 12,288 + 512 x 2 + 1024 = 14,848 MiB of 144,384.
    assert sglang_default_mem_fraction_static(141, 8) == 0.897
    # A 24 GiB card: 512 + 2048 x 1.5 + 24 x 2 + 128 = 3,760 MiB of 24,576 (no 10 GiB floor below 60 GiB).
    assert sglang_default_mem_fraction_static(24, 1) == 0.847


def test_max_concurrency_counts_whole_pages():
    assert max_concurrency(1_000_000, 4096, 64) == 244  # 64 pages per request
    assert max_concurrency(1_000_000, 4097, 64) == 240  # 65 pages per request


@pytest.fixture
def llama(tmp_path: Path):
    return load_checkpoint(write_config(tmp_path / "llama", llama_3_1_70b()))


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("weights", [WeightFormat.BF16, WeightFormat.INT4])
def test_fp8_kv_gives_twice_the_tokens_within_one_page(llama, page_size: int, weights: WeightFormat):
    request = PlanRequest(gpu_memory_gib=80, tensor_parallel=8, weights_format=weights, page_size=page_size)
    bf16 = make_plan(llama, replace(request, kv_cache_dtype=KvCacheDtype.BF16))
    fp8 = make_plan(llama, replace(request, kv_cache_dtype=KvCacheDtype.FP8_E4M3))
    assert bf16.weight_bytes_per_gpu == fp8.weight_bytes_per_gpu
    assert 0 <= fp8.kv_tokens_per_replica - 2 * bf16.kv_tokens_per_replica <= page_size
    assert fp8.kv_tokens_per_replica % page_size == 0


def test_int4_weights_grow_the_kv_budget(llama):
    request = PlanRequest(gpu_memory_gib=80, tensor_parallel=8)
    source = make_plan(llama, request)
    int4 = make_plan(llama, replace(request, weights_format=WeightFormat.INT4))
    freed = source.weight_bytes_per_gpu - int4.weight_bytes_per_gpu
    gained = int4.kv_tokens_per_replica - source.kv_tokens_per_replica
    assert abs(gained - freed / source.kv_bytes_per_token_per_gpu) <= 1


def test_user_mem_fraction_is_used(llama):
    plan = make_plan(llama, PlanRequest(gpu_memory_gib=80, tensor_parallel=8, mem_fraction_static=0.7))
    assert (plan.mem_fraction_static, plan.mem_fraction_static_source) == (0.7, "spec")


def test_data_parallel_replica_holds_each_groups_tokens(llama):
    one = make_plan(llama, PlanRequest(gpu_memory_gib=80, tensor_parallel=8))
    two = make_plan(llama, PlanRequest(gpu_memory_gib=80, tensor_parallel=8, gpus=16))
    assert (two.data_parallel, two.kv_tokens_per_replica) == (2, 2 * one.kv_tokens_per_replica)


def test_plan_that_does_not_fit_says_so(llama):
    plan = make_plan(
        llama, PlanRequest(gpu_memory_gib=80, tensor_parallel=1, weights_format=WeightFormat.BF16)
    )
    assert not plan.fits and plan.kv_tokens_per_replica == 0
    assert any("weights need" in w and "GiB per GPU" in w for w in plan.warnings)


def test_context_that_does_not_fit_one_request_says_so(tmp_path: Path):
    checkpoint = load_checkpoint(write_config(tmp_path / "dsv3", deepseek_v3()))
    plan = make_plan(
        checkpoint,
        PlanRequest(
            gpu_memory_gib=141,
            tensor_parallel=8,
            kv_cache_dtype=KvCacheDtype.BF16,
            contexts=(4096, 131072 * 8),
        ),
    )
    assert not plan.fits and plan.kv_tokens_per_replica > 4096
    assert any("fewer than one request" in w for w in plan.warnings)
    assert any("max_position_embeddings" in w for w in plan.warnings)
