"""From a QuantizedModel spec to a plan and back into status: the operator's path through the planner."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api import QuantizedModel
from kvant_operator.api.status import QuantizedModelStatus
from kvant_operator.planner import PlanRequest, load_checkpoint, make_plan
from tests.unit.planner_configs import deepseek_v3, write_config

KIMI_EXAMPLE = Path(__file__).parents[2] / "examples" / "kimi-k2-int4-experts-fp8kv-8xh200.yaml"


def kimi_k2() -> dict[str, object]:
    return {**deepseek_v3(), "model_type": "kimi_k2", "n_routed_experts": 384, "num_attention_heads": 64,
            "first_k_dense_replace": 1, "vocab_size": 163840, "max_position_embeddings": 131072}  # fmt: skip


def test_production_example_fits_and_beats_the_source(tmp_path: Path):
    model = QuantizedModel.model_validate(yaml.safe_load(KIMI_EXAMPLE.read_text()))
    checkpoint = load_checkpoint(write_config(tmp_path, kimi_k2()))
    request = PlanRequest.from_spec(model.spec)
    assert (request.tensor_parallel, request.gpus, request.group_size) == (8, 8, 32)
    plan = make_plan(checkpoint, request)
    source = make_plan(checkpoint, replace(request, weights_format=None, kv_cache_dtype=KvCacheDtype.BF16))
    assert plan.fits and plan.warnings == []
    assert plan.kv_bytes_per_token_per_gpu == 35_136
    assert plan.max_concurrency[32768] > 4 * source.max_concurrency[32768]


def test_plan_summary_is_valid_status(tmp_path: Path):
    checkpoint = load_checkpoint(write_config(tmp_path, deepseek_v3()))
    plan = make_plan(checkpoint, PlanRequest(gpu_memory_gib=141, tensor_parallel=8))
    status = QuantizedModelStatus.model_validate({"plan": plan.to_status().model_dump(by_alias=True)})
    written = status.model_dump(mode="json", by_alias=True, exclude_none=True)["plan"]
    assert written["kvBytesPerTokenPerGPU"] == plan.kv_bytes_per_token_per_gpu
    assert written["weightBytesPerGPU"] == plan.weight_bytes_per_gpu
    assert written["maxConcurrency"] == {str(c): n for c, n in plan.max_concurrency.items()}
