"""The QuantizedModel models: defaults a user would choose, and every rule rejecting with the field's name."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api import QuantizedModel, QuantizedModelSpec, SpecError
from kvant_operator.api.spec import KvScales, QuantMethod, WeightFormat

EXAMPLES = sorted(
    p for p in (Path(__file__).parents[2] / "examples").glob("*.yaml") if p.name != "kustomization.yaml"
)


def minimal() -> dict[str, Any]:
    return {"source": {"uri": "file:///models/tiny"}, "serving": {"gpu": {"memoryGiB": 80}}}


def with_(change: dict[str, Any]) -> dict[str, Any]:
    """The minimal spec with `change` merged in (nested dicts merge, other values replace)."""

    def merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
        for key, value in patch.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    spec = copy.deepcopy(minimal())
    merge(spec, change)
    return spec


def rejection(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        QuantizedModelSpec.model_validate(spec)
    return str(caught.value)


def test_minimal_spec_gets_the_defaults_a_user_would_choose():
    spec = QuantizedModelSpec.model_validate(minimal())
    assert spec.weights.format is WeightFormat.INT4
    # The weights' defaults are decided by weights_recipe (never filled into the spec): RTN, group
    # 128, and targets by the source, routed experts for an MoE model.
    assert (spec.weights.method, spec.weights.group_size, spec.weights.targets) == (None, None, None)
    dense = spec.weights.recipe(converts=True, moe=False)
    assert (dense.method, dense.group_size, dense.targets) == (QuantMethod.RTN.value, 128, "all-linear")
    assert spec.weights.recipe(converts=True, moe=True).targets == "experts"
    assert spec.kv_cache.dtype is KvCacheDtype.FP8_E4M3
    assert spec.kv_cache.scales is KvScales.CALIBRATE, (
        "FP8 KV must calibrate its scales unless told otherwise"
    )
    assert (
        spec.kv_cache.calibration is not None and spec.kv_cache.calibration.samples == 512
    )  # llm-compressor's KV-cache recipe
    assert spec.serving.tensor_parallel == 1 and spec.serving.gpus == 1
    assert spec.protection.target_token_usage == 0.9


def test_bf16_kv_cache_gets_no_scales():
    spec = QuantizedModelSpec.model_validate(with_({"kvCache": {"dtype": "bf16"}}))
    assert spec.kv_cache.scales is None and spec.kv_cache.calibration is None


def test_bf16_weights_get_no_int4_scheme():
    spec = QuantizedModelSpec.model_validate(with_({"weights": {"format": "bf16"}}))
    recipe = spec.weights.recipe(converts=False, moe=True)
    assert (recipe.method, recipe.group_size, recipe.targets) == (None, None, None)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"weights": {"format": "int5"}}, "format"),
        ({"weights": {"format": "int4", "groupSize": 48}}, "groupSize"),
        ({"weights": {"format": "bf16", "method": "gptq"}}, "spec.weights.method"),
        ({"weights": {"format": "fp8", "groupSize": 64}}, "spec.weights.groupSize"),
        ({"kvCache": {"dtype": "bf16", "scales": "unit"}}, "spec.kvCache.scales"),
        ({"kvCache": {"dtype": "auto", "scales": "unit"}}, "spec.kvCache.scales"),
        ({"kvCache": {"scales": "unit", "calibration": {"samples": 4}}}, "spec.kvCache.calibration"),
        ({"protection": {"concurrency": {"min": 9, "max": 8}}}, "spec.protection.concurrency.min"),
        ({"protection": {"concurrency": {"max": 65}}}, "spec.protection.concurrency.max"),
        ({"protection": {"targetTokenUsage": 1.5}}, "targetTokenUsage"),
        ({"serving": {"replicas": -1}}, "replicas"),
        ({"serving": {"tensorParallel": 3, "gpu": {"count": 8}}}, "spec.serving.tensorParallel"),
        ({"serving": {"engineArgs": ["--kv-cache-dtype=bf16"]}}, "spec.serving.engineArgs"),
        ({"serving": {"engineArgs": ["--abort-on-priority-when-disabled"]}}, "spec.serving.engineArgs"),
        ({"source": {"uri": "http://example.com/model"}}, "spec.source.uri"),
        ({"source": {"uri": "hf://org/model/extra"}}, "spec.source.uri"),
        ({"source": {"uri": "s3://Bad_Bucket/prefix"}}, "spec.source.uri"),
        ({"source": {"uri": "s3://bucket/p", "revision": "main"}}, "spec.source.revision"),
        ({"source": {"s3": {"endpoint": "http://s3.local:8333"}}}, "spec.source.s3"),
        ({"source": {"uri": "s3://bucket/p", "s3": {"endpoint": "ftp://x"}}}, "endpoint"),
        ({"source": {"allowPatterns": ["*.safetensors"]}}, "spec.source.allowPatterns"),
        ({"source": {"uri": "hf://org/m", "allowPatterns": ["/etc/*"]}}, "allowPatterns"),
        ({"limits": {"maxConcurrency": 0}}, "maxConcurrency"),
        ({"serving": {"gpu": {"memoryGiB": 80, "cores": 4}}}, "cores"),
        (
            {
                "serving": {
                    "disaggregation": {
                        "mode": "prefill-decode",
                        "prefill": {"kvCacheDtype": "bf16"},
                        "decode": {"kvCacheDtype": "fp8_e4m3"},
                    }
                }
            },
            "prefill and decode must use the same KV cache dtype",
        ),
    ],
)
def test_invalid_spec_is_rejected_naming_the_field(change: dict[str, Any], field: str):
    assert field in rejection(with_(change))


def test_pd_role_override_equal_to_the_other_role_is_accepted():
    spec = with_(
        {
            "serving": {
                "disaggregation": {
                    "mode": "prefill-decode",
                    "prefill": {"kvCacheDtype": "bf16"},
                    "decode": {"kvCacheDtype": "bf16"},
                }
            }
        }
    )
    assert (
        QuantizedModelSpec.model_validate(spec).serving.disaggregation.decode.kv_cache_dtype
        is KvCacheDtype.BF16
    )


def test_pd_role_override_differing_from_spec_dtype_is_rejected():
    spec = with_(
        {"serving": {"disaggregation": {"mode": "prefill-decode", "decode": {"kvCacheDtype": "bf16"}}}}
    )
    assert "spec.serving.disaggregation" in rejection(spec)


def test_unit_scales_are_accepted_when_chosen_explicitly_with_fp8():
    spec = QuantizedModelSpec.model_validate(with_({"kvCache": {"dtype": "fp8_e5m2", "scales": "unit"}}))
    assert spec.kv_cache.scales is KvScales.UNIT and spec.kv_cache.calibration is None


def test_source_change_is_rejected_on_update():
    old = QuantizedModelSpec.model_validate(minimal())
    new = QuantizedModelSpec.model_validate(with_({"source": {"uri": "file:///models/other"}}))
    with pytest.raises(SpecError, match=r"spec\.source is immutable"):
        new.check_update(old)
    QuantizedModelSpec.model_validate(with_({"limits": {"maxConcurrency": 8}})).check_update(old)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_parse_and_round_trip(path: Path):
    manifest = yaml.safe_load(path.read_text())
    model = QuantizedModel.model_validate(manifest)
    again = QuantizedModel.model_validate(model.to_manifest())
    assert again == model
    assert again.to_manifest()["spec"]["source"] == manifest["spec"]["source"]


def test_engine_priority_flags_are_accepted_together():
    # The gate writes each request's class into `priority` (docs/concepts/tenants.md): with priority
    # scheduling on, an engine that aborts prioritised requests when it is off loses nothing.
    args = ["--enable-priority-scheduling", "--default-priority-value=1", "--abort-on-priority-when-disabled"]
    spec = QuantizedModelSpec.model_validate(with_({"serving": {"engineArgs": args}}))
    assert spec.serving.engine_args == args
