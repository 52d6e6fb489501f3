"""Reading QuantizedModels and their pods in e2e tests."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from kubernetes import client
from tests.kube_wait import wait_for

from kvant_contracts.serving_pod import METRICS_PORT
from kvant_dev.cluster import LocalCluster
from kvant_operator.render.roles import engine_selector

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
    pods = core.list_namespaced_pod(namespace, label_selector=engine_selector(model)).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


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
        status = qm.get("status") or {}
        current = status.get("observedGeneration") == qm["metadata"]["generation"]
        return qm if current and status.get("phase") == "Ready" and is_true(qm, "Ready") else None

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


def metric_value(text: str, name: str, labels: str = "") -> float | None:
    """The value of one sample in Prometheus text format, e.g. name='kvant_gate_configured_limit',
    labels='field="maxConcurrency"'."""
    prefix = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    return None
