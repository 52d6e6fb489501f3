"""Reconciling an unchanged, settled model writes nothing: no status patch, no object update."""

from __future__ import annotations

import time
import urllib.request

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, get_qm, metric_value, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def _versions(cluster, namespace: str) -> dict[str, str]:
    api = cluster.api_client()
    selector = "kvant.dev/model=tiny"
    objs = [
        *client.AppsV1Api(api).list_namespaced_deployment(namespace, label_selector=selector).items,
        *client.CoreV1Api(api).list_namespaced_service(namespace, label_selector=selector).items,
        *client.CoreV1Api(api).list_namespaced_config_map(namespace, label_selector=selector).items,
        *client.PolicyV1Api(api)
        .list_namespaced_pod_disruption_budget(namespace, label_selector=selector)
        .items,
        *client.CoreV1Api(api).list_namespaced_service_account(namespace, label_selector=selector).items,
        *client.RbacAuthorizationV1Api(api).list_namespaced_role(namespace, label_selector=selector).items,
        *client.RbacAuthorizationV1Api(api)
        .list_namespaced_role_binding(namespace, label_selector=selector)
        .items,
    ]
    return {f"{o.kind}/{o.metadata.name}": o.metadata.resource_version for o in objs}


def _reconciles(operator) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        metric_value(text, "kvant_operator_reconciles_total", f'result="{r}"') or 0
        for r in ("busy", "settled")
    )


def _reconciled(operator, count: float):
    return lambda: _reconciles(operator) >= count


def test_twenty_reconciles_of_an_unchanged_model_write_nothing(cluster, operator, namespace, tiny_model):
    apply(cluster, namespace, tiny_model(kvCache={"dtype": "bf16"}))
    wait_ready(cluster, namespace, "tiny")
    time.sleep(3)  # let the last Ready write land before taking the baseline
    objects = _versions(cluster, namespace)
    status = get_qm(cluster, namespace, "tiny")["status"]
    start = _reconciles(operator)

    # Each annotation is a watch event that wakes the model's daemon for one reconcile.
    custom = client.CustomObjectsApi(cluster.api_client())
    last_rv = ""
    for i in range(20):
        patched = custom.patch_namespaced_custom_object(
            "kvant.dev",
            "v1alpha1",
            namespace,
            "quantizedmodels",
            "tiny",
            {"metadata": {"annotations": {"e2e.kvant.dev/poke": str(i)}}},
        )
        last_rv = patched["metadata"]["resourceVersion"]
        wait_for(_reconciled(operator, start + i + 1), 30, f"reconcile {i + 1}")

    assert _reconciles(operator) >= start + 20
    qm = get_qm(cluster, namespace, "tiny")
    assert qm["metadata"]["resourceVersion"] == last_rv, "the operator wrote to the model after the last poke"
    assert qm["status"] == status
    assert _versions(cluster, namespace) == objects
