"""Deleting a QuantizedModel removes every object it owns (garbage collection through ownerReferences)."""

from __future__ import annotations

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, owned_objects, wait_ready

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
    selector = "kvant.dev/model=tiny,app.kubernetes.io/component!=artifact-record"
    return owned_objects(cluster.api_client(), namespace, selector)


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
