"""spec.autoscaling: refused where it cannot work, rendered as an HPA on the model's scale
subresource where it can, taken out again when unset, and read back into status.autoscaling."""

from __future__ import annotations

from typing import Any

import pytest

from kvant_contracts.autoscaling import DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS, DEMAND_METRIC
from kvant_operator.api.rules import SpecError
from kvant_operator.api.status import ArtifactStatus
from kvant_operator.kube_cache import serving_entry
from kvant_operator.reconcile.serving_step import serve
from kvant_operator.reconcile.state import Pass
from kvant_operator.reconcile.status_patch import outcome
from kvant_operator.render.autoscaler import HPA
from tests.unit import render_inputs
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, SETTINGS, body, new_pass

SCALING = {"minReplicas": 1, "maxReplicas": 3}


def _pass(**overrides: Any) -> Pass:
    p = new_pass(body(**overrides), planned=True)
    p.artifact = ArtifactStatus(uri="pvc://kvant-artifacts/abc", digest="sha256:abc")
    return p


def _spec(**overrides: Any) -> Any:
    return render_inputs.spec_of(render_inputs.body(**overrides))


def test_the_bounds_and_the_replicas_must_agree() -> None:
    assert _spec(autoscaling=SCALING).autoscaling.target_demand == pytest.approx(0.8)
    with pytest.raises(ValueError, match=r"spec.autoscaling.minReplicas must not exceed"):
        _spec(autoscaling={"minReplicas": 4, "maxReplicas": 3})
    serving = {**render_inputs.body()["spec"]["serving"], "replicas": 5}
    with pytest.raises(ValueError, match=r"spec.serving.replicas must lie within"):
        _spec(autoscaling=SCALING, serving=serving)


def test_prefill_decode_is_refused_naming_the_field() -> None:
    serving = {**render_inputs.body()["spec"]["serving"], "disaggregation": {"mode": "prefill-decode"}}
    with pytest.raises((SpecError, ValueError), match=r"spec.autoscaling scales spec.serving.replicas"):
        _spec(autoscaling=SCALING, serving=serving)


def test_the_hpa_targets_the_scale_subresource_on_the_demand_metric() -> None:
    kube, p = MemoryKube(), _pass(autoscaling={**SCALING, "targetDemand": 0.7})
    serve(p, kube, SETTINGS)
    hpa = kube.get(HPA[0], HPA[1], NAMESPACE, "tiny")
    assert hpa is not None
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "kvant.dev/v1alpha1",
        "kind": "QuantizedModel",
        "name": "tiny",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 3)
    (metric,) = spec["metrics"]
    assert metric["pods"]["metric"]["name"] == DEMAND_METRIC
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "700m"}
    down = spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
    assert down == DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS
    assert hpa["metadata"]["ownerReferences"][0]["kind"] == "QuantizedModel"


def test_unsetting_autoscaling_deletes_the_hpa_and_the_status_block() -> None:
    kube = MemoryKube()
    serve(_pass(autoscaling=SCALING), kube, SETTINGS)
    assert kube.get(HPA[0], HPA[1], NAMESPACE, "tiny") is not None
    manifest = body()
    manifest["metadata"]["generation"] = 4  # a spec change: the one time objects are pruned
    manifest["status"] = {"observedGeneration": 3, "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}
    p = new_pass(manifest, planned=True)
    p.artifact = ArtifactStatus(uri="pvc://kvant-artifacts/abc", digest="sha256:abc")
    phase, busy = serve(p, kube, SETTINGS)
    assert kube.get(HPA[0], HPA[1], NAMESPACE, "tiny") is None
    assert outcome(manifest, p.log, phase, busy, p).status["autoscaling"] is None


@pytest.mark.parametrize(
    ("conditions", "reason", "said"),
    [
        ([], "Pending", "has not reported"),
        (
            [
                {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale", "message": "ok"},
                {
                    "type": "ScalingActive",
                    "status": "False",
                    "reason": "FailedGetPodsMetric",
                    "message": f"unable to get metric {DEMAND_METRIC}: the server could not find it",
                },
            ],
            "MetricsUnavailable",
            "install prometheus-adapter",
        ),
        (
            [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale", "message": "ok"},
                {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound", "message": "ok"},
                {
                    "type": "ScalingLimited",
                    "status": "True",
                    "reason": "TooManyReplicas",
                    "message": "at max",
                },
            ],
            "TooManyReplicas",
            "max",
        ),
    ],
)
def test_status_says_what_the_hpa_says(conditions: list[dict[str, str]], reason: str, said: str) -> None:
    kube = MemoryKube()
    serve(_pass(autoscaling=SCALING), kube, SETTINGS)
    hpa = kube.objects[(HPA[0], HPA[1], NAMESPACE, "tiny")]
    hpa["status"] = {"currentReplicas": 2, "desiredReplicas": 3, "conditions": conditions}
    if conditions:
        hpa["status"]["lastScaleTime"] = "2026-12-02T04:00:00Z"
    p = _pass(autoscaling=SCALING)
    serve(p, kube, SETTINGS)
    assert p.autoscaling is not None
    assert (p.autoscaling.current_replicas, p.autoscaling.desired_replicas) == (2, 3)
    assert p.autoscaling.reason == reason and said in p.autoscaling.message


def test_the_operators_index_keeps_what_status_autoscaling_reads() -> None:
    """A settled model reads its HPA from the operator's watch-backed index, which keeps only what
    some reconcile reads; without the HPA's status there, status.autoscaling never moved."""
    kube = MemoryKube()
    serve(_pass(autoscaling=SCALING), kube, SETTINGS)
    hpa = dict(kube.objects[(HPA[0], HPA[1], NAMESPACE, "tiny")])
    hpa["status"] = {
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "lastScaleTime": "2026-12-02T04:00:00Z",
        "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale"}],
        "currentMetrics": [{"type": "Pods"}],  # not read: not kept
    }
    entry = serving_entry(hpa)
    assert entry is not None
    kept = entry[(NAMESPACE, "tiny")]["status"]
    assert kept == {k: v for k, v in hpa["status"].items() if k != "currentMetrics"}
