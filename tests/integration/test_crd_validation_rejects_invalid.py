"""The API server rejects invalid QuantizedModels at create or update, each message naming the field.

Every create-time case is also fed to the Python models: they must reject it too, and where the
rule is CEL, with the very message the API server returned (one rule, two enforcers).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kvant_operator.api import QuantizedModelSpec
from kvant_operator.api import placement as placement_models
from kvant_operator.api import spec as spec_models
from kvant_operator.api.rules import ApiModel
from tests.integration.qm_crd import GROUP, PLURAL, VERSION, install_crd, manifest

pytestmark = pytest.mark.cluster

NAMESPACE = "qm-validation"
MODELS = [
    m
    for m in {**vars(spec_models), **vars(placement_models)}.values()
    if isinstance(m, type) and issubclass(m, ApiModel)
]
RULE_MESSAGES = [r.message for m in MODELS for r in m.rules] + [
    r.message for m in MODELS for r in m.transition_rules
]


def valid_spec() -> dict[str, Any]:
    return {
        "source": {"uri": "file:///models/tiny"},
        "serving": {"engine": "simulator", "gpu": {"memoryGiB": 80}},
    }


DELETE = object()  # in a change: remove this key


def changed(patch: dict[str, Any]) -> dict[str, Any]:
    def merge(into: dict[str, Any], change: dict[str, Any]) -> None:
        for key, value in change.items():
            if value is DELETE:
                del into[key]
            elif isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    spec = copy.deepcopy(valid_spec())
    merge(spec, patch)
    return spec


PD = {"mode": "prefill-decode"}
# (id, change to the valid spec, the field the message must name, whether a CEL rule rejects it)
CREATE_CASES = [
    ("bad-weight-format", {"weights": {"format": "int5"}}, "spec.weights.format", False),
    ("group-size-outside-set", {"weights": {"groupSize": 48}}, "spec.weights.groupSize", False),
    ("method-on-bf16", {"weights": {"format": "bf16", "method": "gptq"}}, "spec.weights.method", True),
    ("group-size-on-fp8", {"weights": {"format": "fp8", "groupSize": 64}}, "spec.weights.groupSize", True),
    ("bad-kv-dtype", {"kvCache": {"dtype": "fp4"}}, "spec.kvCache.dtype", False),
    ("unit-scales-on-bf16-kv", {"kvCache": {"dtype": "bf16", "scales": "unit"}}, "spec.kvCache.scales", True),
    ("unit-scales-on-auto-kv", {"kvCache": {"dtype": "auto", "scales": "unit"}}, "spec.kvCache.scales", True),
    (
        "calibration-with-unit-scales",
        {"kvCache": {"scales": "unit", "calibration": {"samples": 4}}},
        "spec.kvCache.calibration",
        True,
    ),
    (
        "concurrency-min-above-max",
        {"protection": {"concurrency": {"min": 9, "max": 8}}},
        "spec.protection.concurrency.min",
        True,
    ),
    (
        "protection-max-above-limit",
        {"limits": {"maxConcurrency": 16}, "protection": {"concurrency": {"max": 32}}},
        "spec.protection.concurrency.max",
        True,
    ),
    (
        "pd-mismatched-kv-dtypes",
        {
            "serving": {
                "disaggregation": {
                    **PD,
                    "prefill": {"kvCacheDtype": "bf16"},
                    "decode": {"kvCacheDtype": "fp8_e4m3"},
                }
            }
        },
        "spec.serving.disaggregation",
        True,
    ),
    (
        "pd-role-dtype-differs-from-spec",
        {
            "kvCache": {"dtype": "fp8_e4m3"},
            "serving": {"disaggregation": {**PD, "decode": {"kvCacheDtype": "bf16"}}},
        },
        "spec.serving.disaggregation",
        True,
    ),
    ("negative-replicas", {"serving": {"replicas": -1}}, "spec.serving.replicas", False),
    ("cpu-without-cpu-block", {"serving": {"device": "cpu"}}, "spec.serving.device", True),
    (
        "cpu-with-tensor-parallel",
        {"serving": {"device": "cpu", "gpu": DELETE, "cpu": {"memoryGiB": 8}, "tensorParallel": 2}},
        "spec.serving.device",
        True,
    ),
    (
        "cpu-with-mem-fraction",
        {"serving": {"device": "cpu", "gpu": DELETE, "cpu": {"memoryGiB": 8}, "memFractionStatic": 0.8}},
        "spec.serving.device",
        True,
    ),
    (
        "cpu-kv-cache-zero",
        {"serving": {"device": "cpu", "gpu": DELETE, "cpu": {"memoryGiB": 8, "kvCacheMiB": 0}}},
        "spec.serving.cpu.kvCacheMiB",
        False,
    ),
    ("gptq-block-without-method", {"weights": {"gptq": {"samples": 8}}}, "spec.weights.gptq", True),
    (
        "gptq-dataset-outside-source",
        {"weights": {"method": "gptq", "gptq": {"dataset": "../etc"}}},
        "spec.weights.gptq.dataset",
        True,
    ),
    (
        "cpu-with-e5m2-cache",
        {
            "kvCache": {"dtype": "fp8_e5m2"},
            "serving": {"device": "cpu", "gpu": DELETE, "cpu": {"memoryGiB": 8}},
        },
        "spec.kvCache.dtype",
        True,
    ),
    ("device-cuda-without-gpu", {"serving": {"gpu": DELETE}}, "spec.serving.device", True),
    ("bad-device", {"serving": {"device": "tpu"}}, "spec.serving.device", False),
    ("replicas-under-pd", {"serving": {"replicas": 2, "disaggregation": PD}}, "spec.serving.replicas", True),
    (
        "token-usage-above-one",
        {"protection": {"targetTokenUsage": 1.5}},
        "spec.protection.targetTokenUsage",
        False,
    ),
    ("token-usage-zero", {"protection": {"targetTokenUsage": 0}}, "spec.protection.targetTokenUsage", False),
    ("zero-max-concurrency", {"limits": {"maxConcurrency": 0}}, "spec.limits.maxConcurrency", False),
    (
        "tp-not-dividing-gpus",
        {"serving": {"tensorParallel": 3, "gpu": {"count": 8}}},
        "spec.serving.tensorParallel",
        True,
    ),
    (
        "engine-args-own-kv-dtype",
        {"serving": {"engineArgs": ["--trust-remote-code", "--kv-cache-dtype=bf16"]}},
        "spec.serving.engineArgs",
        True,
    ),
    (
        "role-engine-args-own-tp",
        {"serving": {"disaggregation": {**PD, "prefill": {"engineArgs": ["--tp-size"]}}}},
        "spec.serving.disaggregation.prefill.engineArgs",
        True,
    ),
    (
        "engine-aborts-every-prioritised-request",
        {
            "serving": {
                "disaggregation": {**PD, "decode": {"engineArgs": ["--abort-on-priority-when-disabled"]}}
            }
        },
        "spec.serving.disaggregation.decode.engineArgs",
        True,
    ),
    (
        "conservativeness-twice",
        {
            "serving": {
                "scheduler": {"conservativeness": 0.3},
                "disaggregation": {**PD, "prefill": {"engineArgs": ["--schedule-conservativeness=2"]}},
            }
        },
        "spec.serving.scheduler.conservativeness",
        True,
    ),
    (
        "toleration-value-with-exists",
        {"serving": {"placement": {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}}},
        "spec.serving.placement.tolerations[].value",
        True,
    ),
    (
        "toleration-seconds-without-noexecute",
        {"serving": {"placement": {"tolerations": [{"key": "a", "tolerationSeconds": 5}]}}},
        "spec.serving.placement.tolerations[].tolerationSeconds",
        True,
    ),
    (
        "lost-node-seconds-negative",
        {"serving": {"placement": {"lostNodeSeconds": -1}}},
        "spec.serving.placement.lostNodeSeconds",
        False,
    ),
    (
        "priority-with-a-policy-sglang-refuses",
        {
            "serving": {
                "priorityScheduling": True,
                "disaggregation": {**PD, "decode": {"engineArgs": ["--schedule-policy=lpm"]}},
            }
        },
        "spec.serving.priorityScheduling",
        True,
    ),
    (
        "scheduler-knob-out-of-bounds",
        {"serving": {"scheduler": {"minNewTokenRatioFactor": 1.5}}},
        "spec.serving.scheduler.minNewTokenRatioFactor",
        False,
    ),
    # The adapter pool (spec.serving.lora): each number SGLang would refuse, and the CPU backend.
    ("lora-rank-zero", {"serving": {"lora": {"maxRank": 0}}}, "spec.serving.lora.maxRank", False),
    ("lora-rank-too-large", {"serving": {"lora": {"maxRank": 513}}}, "spec.serving.lora.maxRank", False),
    ("lora-without-rank", {"serving": {"lora": {"slots": 4}}}, "spec.serving.lora.maxRank", False),
    (
        "lora-unknown-target",
        {"serving": {"lora": {"maxRank": 16, "targetModules": ["q_proj", "lm_head"]}}},
        "spec.serving.lora.targetModules",
        False,
    ),
    (
        "lora-no-targets",
        {"serving": {"lora": {"maxRank": 16, "targetModules": []}}},
        "spec.serving.lora.targetModules",
        False,
    ),
    ("lora-zero-slots", {"serving": {"lora": {"maxRank": 16, "slots": 0}}}, "spec.serving.lora.slots", False),
    (
        "lora-max-loaded-below-slots",
        {"serving": {"lora": {"maxRank": 16, "slots": 8, "maxLoaded": 4}}},
        "spec.serving.lora.maxLoaded",
        True,
    ),
    (
        "lora-on-sglangs-cpu-backend",
        {
            "serving": {
                "engine": "sglang",
                "device": "cpu",
                "gpu": DELETE,
                "cpu": {"memoryGiB": 8},
                "lora": {"maxRank": 16},
            }
        },
        "spec.serving.lora",
        True,
    ),
    (
        "lora-flag-in-engine-args",
        {"serving": {"engineArgs": ["--max-lora-rank=64"]}},
        "spec.serving.engineArgs",
        True,
    ),
    ("unknown-source-scheme", {"source": {"uri": "ftp://host/model"}}, "spec.source.uri", True),
    (
        "calibration-dataset-leaves-the-source",
        {
            "kvCache": {
                "dtype": "fp8_e4m3",
                "scales": "calibrate",
                "calibration": {"dataset": "../../etc/passwd"},
            }
        },
        "spec.kvCache.calibration.dataset",
        True,
    ),
    # Fetched sources: refused at apply, not accepted and failed later.
    ("hf-uri-not-org-name", {"source": {"uri": "hf://org/model/extra"}}, "spec.source.uri", True),
    (
        "s3-revision",
        {"source": {"uri": "s3://models/tiny", "revision": "main"}},
        "spec.source.revision",
        True,
    ),
    (
        "s3-block-on-pvc",
        {"source": {"uri": "pvc://models/tiny", "s3": {"region": "eu-west-1"}}},
        "spec.source.s3",
        True,
    ),
    (
        "allow-patterns-on-pvc",
        {"source": {"uri": "pvc://models/tiny", "allowPatterns": ["*.safetensors"]}},
        "spec.source.allowPatterns",
        True,
    ),
    (
        "s3-endpoint-not-http",
        {"source": {"uri": "s3://models/tiny", "s3": {"endpoint": "file:///etc"}}},
        "spec.source.s3.endpoint",
        False,
    ),
    ("missing-gpu-memory", {"serving": {"gpu": {"memoryGiB": DELETE}}}, "spec.serving.gpu.memoryGiB", False),
    (
        "bad-credentials-secret-name",
        {"source": {"credentialsSecret": "Not_A_Name"}},
        "spec.source.credentialsSecret",
        False,
    ),
    (
        "autoscaling-min-above-max",
        {"autoscaling": {"minReplicas": 4, "maxReplicas": 3}},
        "spec.autoscaling.minReplicas",
        True,
    ),
    (
        "autoscaling-replicas-outside-bounds",
        {"serving": {"replicas": 5}, "autoscaling": {"maxReplicas": 3}},
        "spec.serving.replicas",
        True,
    ),
    (
        "autoscaling-with-prefill-decode",
        {"serving": {"disaggregation": PD}, "autoscaling": {"maxReplicas": 3}},
        "spec.autoscaling",
        True,
    ),
    (
        "tenant-names-repeat",
        {"tenancy": {"tenants": [{"name": "acme"}, {"name": "acme", "weight": 2}]}},
        "spec.tenancy.tenants",
        True,
    ),
    (
        "tenant-named-other",
        {"tenancy": {"tenants": [{"name": "other"}]}},
        "spec.tenancy.tenants[].name",
        True,
    ),
    ("bad-priority", {"tenancy": {"defaultPriority": "urgent"}}, "spec.tenancy.defaultPriority", False),
]


@pytest.fixture(scope="module")
def custom(apiserver: Any) -> Iterator[client.CustomObjectsApi]:
    install_crd(apiserver, NAMESPACE)
    yield client.CustomObjectsApi(apiserver.api_client())
    apiserver.kubectl("delete", "quantizedmodels", "--all", "-n", NAMESPACE, "--wait=false", check=False)


def server_rejection(call: Any, status: int = 422) -> str:
    with pytest.raises(ApiException) as rejected:
        call()
    assert rejected.value.status == status, rejected.value.body
    body = json.loads(rejected.value.body)
    causes = " | ".join(
        f"{c.get('field')}: {c.get('message')}" for c in body.get("details", {}).get("causes", [])
    )
    return f"{body['message']} | {causes}"


def model_rejection(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as rejected:
        QuantizedModelSpec.model_validate(spec)
    return str(rejected.value)


def test_the_valid_spec_is_accepted(custom: client.CustomObjectsApi):
    body = manifest("valid", valid_spec())
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body, field_validation="Strict")


def test_a_valid_placement_is_accepted(custom: client.CustomObjectsApi):
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "pool", "value": "h200", "effect": "NoExecute", "tolerationSeconds": 60},
        {"operator": "Exists"},
    ]
    placement = {"spread": "required", "lostNodeSeconds": 90, "tolerations": tolerations}
    body = manifest("placed", changed({"serving": {"placement": placement}}))
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body, field_validation="Strict")


@pytest.mark.parametrize(
    ("case", "change", "field", "by_cel"), CREATE_CASES, ids=[c[0] for c in CREATE_CASES]
)
def test_invalid_resource_is_rejected_at_create(
    custom: client.CustomObjectsApi, case: str, change: dict[str, Any], field: str, by_cel: bool
):
    spec = changed(change)
    body = manifest(case, spec)
    message = server_rejection(
        lambda: custom.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, body, field_validation="Strict"
        )
    )
    assert field in message, message
    ours = model_rejection(spec)
    assert field.rsplit(".", 1)[-1] in ours, ours
    if by_cel:
        shared = [m for m in RULE_MESSAGES if m in message]
        assert shared, f"expected a CEL rule's message: {message}"
        for rule_message in shared:
            assert rule_message in ours, f"the models reject with another message: {ours}"


def test_unknown_field_is_rejected_naming_it(custom: client.CustomObjectsApi):
    body = manifest("unknown-field", changed({"serving": {"gpus": 8}}))
    message = server_rejection(
        lambda: custom.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, body, field_validation="Strict"
        ),
        status=400,  # strict decoding refuses before validation
    )
    assert "spec.serving.gpus" in message, message


def create_valid(custom: client.CustomObjectsApi, name: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, manifest(name, valid_spec()))


def test_source_change_is_rejected_at_update(custom: client.CustomObjectsApi):
    create_valid(custom, "immutable-source")
    patch = {"spec": {"source": {"uri": "file:///models/other"}}}
    message = server_rejection(
        lambda: custom.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, "immutable-source", patch
        )
    )
    assert "spec.source" in message and "immutable" in message, message
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, "immutable-source", {"spec": {"limits": {"maxConcurrency": 8}}}
    )


def test_limit_edit_breaking_a_rule_is_rejected_at_update(custom: client.CustomObjectsApi):
    create_valid(custom, "limit-edit")
    patch = {"spec": {"protection": {"concurrency": {"min": 4}}, "limits": {"maxConcurrency": 2}}}
    message = server_rejection(
        lambda: custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "limit-edit", patch)
    )
    assert "spec.protection.concurrency.min" in message, message


def test_kubectl_apply_shows_the_field_to_the_user(apiserver: Any, custom: client.CustomObjectsApi):
    bad = manifest("kubectl-bad", changed({"weights": {"format": "bf16", "groupSize": 128}}))
    result = apiserver.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(bad), check=False)
    assert result.returncode != 0
    assert "spec.weights.groupSize" in result.stderr and "format: int4" in result.stderr, result.stderr
