"""Reading QuantizedModels and their pods in e2e tests."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kvant_dev.cluster import LocalCluster

Obj = dict[str, Any]


def get_qm(cluster: LocalCluster, namespace: str, name: str) -> Obj:
    custom = client.CustomObjectsApi(cluster.api_client())
    found: Obj = custom.get_namespaced_custom_object(
        "kvant.dev", "v1alpha1", namespace, "quantizedmodels", name
    )
    return found


def condition(qm: Obj, kind: str) -> Obj | None:
    return next((c for c in (qm.get("status") or {}).get("conditions", []) if c["type"] == kind), None)


def is_true(qm: Obj, kind: str) -> bool:
    found = condition(qm, kind)
    return found is not None and found["status"] == "True"


def serving_pods(cluster: LocalCluster, namespace: str, model: str) -> list[client.V1Pod]:
    core = client.CoreV1Api(cluster.api_client())
    pods = core.list_namespaced_pod(namespace, label_selector=f"kvant.dev/model={model},kvant.dev/role").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]
