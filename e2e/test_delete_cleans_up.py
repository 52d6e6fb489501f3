"""Deleting a QuantizedModel removes every object it owns (garbage collection through ownerReferences)."""

from __future__ import annotations

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

OWNED_KINDS = (
    "deployments",
    "services",
    "configmaps",
    "jobs",
    "poddisruptionbudgets",
    "pods",
    "serviceaccounts",
    "roles",
    "rolebindings",
)


def _owned(cluster, namespace: str) -> dict[str, list[str]]:
    api = cluster.api_client()
    core, apps, batch, policy, rbac = (
        client.CoreV1Api(api),
        client.AppsV1Api(api),
        client.BatchV1Api(api),
        client.PolicyV1Api(api),
        client.RbacAuthorizationV1Api(api),
    )
    selector = "kvant.dev/model=tiny,app.kubernetes.io/component!=artifact-record"
    listed = {
        "deployments": apps.list_namespaced_deployment(namespace, label_selector=selector).items,
        "services": core.list_namespaced_service(namespace, label_selector=selector).items,
        "configmaps": core.list_namespaced_config_map(namespace, label_selector=selector).items,
        "jobs": batch.list_namespaced_job(namespace, label_selector=selector).items,
        "poddisruptionbudgets": policy.list_namespaced_pod_disruption_budget(
            namespace, label_selector=selector
        ).items,
        "pods": core.list_namespaced_pod(namespace, label_selector=selector).items,
        # The gate's account and its Role on the limits ConfigMap.
        "serviceaccounts": core.list_namespaced_service_account(namespace, label_selector=selector).items,
        "roles": rbac.list_namespaced_role(namespace, label_selector=selector).items,
        "rolebindings": rbac.list_namespaced_role_binding(namespace, label_selector=selector).items,
    }
    return {kind: [o.metadata.name for o in objs] for kind, objs in listed.items()}


def test_deleting_the_model_removes_owned_objects(cluster, operator, namespace, tiny_model):
    apply(cluster, namespace, tiny_model(kvCache={"dtype": "bf16"}))
    wait_ready(cluster, namespace, "tiny")
    before = _owned(cluster, namespace)
    assert all(before[kind] for kind in OWNED_KINDS), before

    cluster.kubectl("delete", "-n", namespace, "qm/tiny", "--timeout=60s")
    wait_for(lambda: not any(_owned(cluster, namespace).values()), 90, "garbage collection of owned objects")
    records = (
        client.CoreV1Api(cluster.api_client())
        .list_namespaced_config_map(namespace, label_selector="app.kubernetes.io/component=artifact-record")
        .items
    )
    assert len(records) == 1, "the artifact record stays, so re-creating the model reuses the artifact"
