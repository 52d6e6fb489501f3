"""spec.evaluation: a candidate within maxKLDivergence is Validated and served; one outside it is
not rolled out (blockRollout), and the conditions name the metric and the threshold."""

from __future__ import annotations

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, condition, get_qm, is_true, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_accuracy_gate_passes_one_candidate_and_blocks_the_other(cluster, operator, namespace, tiny_model):
    apply(cluster, namespace, tiny_model("lenient", evaluation={"maxKLDivergence": 10}))
    apply(
        cluster, namespace, tiny_model("strict", evaluation={"maxKLDivergence": 1e-9, "blockRollout": True})
    )

    qm = wait_ready(cluster, namespace, "lenient", timeout=300)
    validated = condition(qm, "Validated")
    assert validated is not None
    assert validated["status"] == "True" and validated["reason"] == "Passed"
    assert "meanKLDivergence" in validated["message"]

    def degraded() -> dict | None:
        found = condition(get_qm(cluster, namespace, "strict"), "Degraded")
        return found if found and found["status"] == "True" else None

    found = wait_for(degraded, 300, "qm/strict to be Degraded by the accuracy gate")
    assert found["reason"] == "EvaluationFailed"
    strict = get_qm(cluster, namespace, "strict")
    gate = condition(strict, "Validated")
    assert gate is not None
    assert gate["status"] == "False" and gate["reason"] == "GateFailed"
    assert "meanKLDivergence" in gate["message"] and "1e-09" in gate["message"]
    assert not is_true(strict, "Ready")
    deployments = (
        client.AppsV1Api(cluster.api_client())
        .list_namespaced_deployment(namespace, label_selector="kvant.dev/model=strict")
        .items
    )
    assert deployments == [], "a candidate that failed the gate must not get serving pods"
