"""Limits and protection edits change only the limits ConfigMap; engine edits change the pod template."""

from __future__ import annotations

import yaml

from kvant_operator.render.limits_configmap import limits_configmap, limits_for
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location
from tests.unit.render_inputs import body, plan, spec_of

MODEL_DIR = Location(
    {"name": "artifacts", "persistentVolumeClaim": {"claimName": "kvant-artifacts"}}, "/artifacts", "k"
)


def _deployment(manifest: dict, kv_dtype: str = "fp8_e4m3") -> dict:
    spec = spec_of(manifest)
    inputs = ServingInputs(manifest, spec, plan(dtype=kv_dtype), MODEL_DIR, "sha256:x", OperatorSettings())
    return deployment(inputs, roles(spec)[0])


def test_limits_and_protection_edits_render_the_same_deployment():
    before = body()
    after = body(
        limits={"maxConcurrency": 3, "maxQueued": 1, "queueTimeoutSeconds": 2},
        protection={"mode": "observe", "targetTokenUsage": 0.5, "concurrency": {"min": 1}},
    )
    assert _deployment(before) == _deployment(after)
    old_limits = limits_configmap(before, spec_of(before), None)
    new_limits = limits_configmap(after, spec_of(after), None)
    assert old_limits["data"] != new_limits["data"]
    assert yaml.safe_load(new_limits["data"]["limits.yaml"])["maxConcurrency"] == 3


def test_kv_dtype_edit_changes_the_pod_template():
    fp8 = _deployment(body())
    bf16 = _deployment(body(kvCache={"dtype": "bf16"}), kv_dtype="bf16")
    hash_key = "kvant.dev/engine-config-hash"
    fp8_hash = fp8["spec"]["template"]["metadata"]["annotations"][hash_key]
    assert fp8_hash != bf16["spec"]["template"]["metadata"]["annotations"][hash_key]


def test_effective_concurrency_is_the_ceiling_within_spec_bounds():
    spec = spec_of(body(limits={"maxConcurrency": 8}, protection={"concurrency": {"min": 2}}))

    def bounds(effective: int | None) -> tuple[int, int]:
        concurrency = limits_for(spec, effective).concurrency
        return concurrency.min, concurrency.max

    assert bounds(None) == (2, 8)
    assert bounds(5) == (2, 5)
    assert bounds(1) == (2, 2)  # never below min
    assert bounds(50) == (2, 8)  # never above the spec
