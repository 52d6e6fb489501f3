"""Reading QuantizedModels and their pods in e2e tests."""

from __future__ import annotations

import json
import urllib.request

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tests.kube_wait import wait_for

from kvant_contracts.kube_object import Obj
from kvant_contracts.serving_pod import GATE_PORT, METRICS_PORT
from kvant_dev.cluster import LocalCluster
from kvant_operator.object_keys import KIND_LABEL, MODEL_LABEL
from kvant_operator.render.roles import RoleKind, engine_selector

# Errors of a poll that meets the apiserver (or etcd behind it) down, as faults cause: not back yet.
API_DOWN = (ApiException, urllib3.exceptions.HTTPError, OSError)


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


def ready_for_generation(qm: Obj) -> bool:
    """Ready, for the generation the operator has seen being the current one."""
    status = qm.get("status") or {}
    return status.get("observedGeneration") == qm["metadata"]["generation"] and is_true(qm, "Ready")


def pod_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def router_workers(router: client.V1Pod) -> int:
    """How many engines this router pod has registered (smg's /workers); -1 when it does not answer."""
    try:
        with urllib.request.urlopen(
            f"http://{router.status.pod_ip}:{GATE_PORT}/workers", timeout=5
        ) as answer:
            return len(json.load(answer).get("workers", []))
    except (OSError, ValueError):
        return -1


def owned_objects(api: client.ApiClient, namespace: str, selector: str) -> dict[str, list[str]]:
    """The names of the objects of every kind a QuantizedModel owns that `selector` picks in
    `namespace`, by kind (the plural)."""
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    policy, rbac = client.PolicyV1Api(api), client.RbacAuthorizationV1Api(api)
    networking = client.NetworkingV1Api(api)
    listed = {
        "deployments": apps.list_namespaced_deployment,
        "services": core.list_namespaced_service,
        "configmaps": core.list_namespaced_config_map,
        "jobs": batch.list_namespaced_job,
        "poddisruptionbudgets": policy.list_namespaced_pod_disruption_budget,
        "pods": core.list_namespaced_pod,
        # The gate's account and its Role on the limits ConfigMap.
        "serviceaccounts": core.list_namespaced_service_account,
        "roles": rbac.list_namespaced_role,
        "rolebindings": rbac.list_namespaced_role_binding,
        "networkpolicies": networking.list_namespaced_network_policy,
    }
    return {
        kind: [o.metadata.name for o in list_kind(namespace, label_selector=selector).items]
        for kind, list_kind in listed.items()
    }


def serving_pods(cluster: LocalCluster, namespace: str, model: str) -> list[client.V1Pod]:
    core = client.CoreV1Api(cluster.api_client())
    pods = core.list_namespaced_pod(namespace, label_selector=engine_selector(model)).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def router_pods(cluster: LocalCluster, namespace: str, model: str) -> list[client.V1Pod]:
    """The model's router pods that are not being deleted."""
    selector = f"{MODEL_LABEL}={model},{KIND_LABEL}={RoleKind.ROUTER.value}"
    pods = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(namespace, label_selector=selector)
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


def service_url(cluster: LocalCluster, namespace: str, name: str) -> str:
    """The model's Service, as clients reach it: its ClusterIP (kube-proxy routes it to a gate)."""
    service = client.CoreV1Api(cluster.api_client()).read_namespaced_service(name, namespace)
    port = next(p.port for p in service.spec.ports if p.name == "http")
    return f"http://{service.spec.cluster_ip}:{port}"


def metrics_url(pod: client.V1Pod) -> str:
    """A serving pod's metrics port: the gate's series followed by its engine's."""
    return f"http://{pod.status.pod_ip}:{METRICS_PORT}"


def apply(cluster: LocalCluster, namespace: str, manifest: Obj) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def patch_spec(cluster: LocalCluster, namespace: str, name: str, spec_patch: Obj) -> None:
    cluster.kubectl(
        "patch", "-n", namespace, f"qm/{name}", "--type=merge", "-p", json.dumps({"spec": spec_patch})
    )


def wait_ready(cluster: LocalCluster, namespace: str, name: str, timeout: int = 180) -> Obj:
    """Ready for the current generation (kstatus: observedGeneration must have caught up)."""

    def ready() -> Obj | None:
        qm = get_qm(cluster, namespace, name)
        return qm if ready_for_generation(qm) and (qm.get("status") or {}).get("phase") == "Ready" else None

    return wait_for(ready, timeout, f"qm/{name} to be Ready for its current generation")


def generate(url: str, new_tokens: int = 2, timeout: float = 30) -> Obj:
    """One /generate through the model's Service; returns SGLang's answer (fails on a non-200)."""
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": new_tokens}}).encode()
    request = urllib.request.Request(
        f"{url}/generate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: Obj = json.load(response)
    return answer
