"""Deployments go through the real controller-manager and scheduler onto the node agent's GPU node."""

from __future__ import annotations

import ipaddress
import json
import urllib.request

import pytest
from kubernetes import client

from tests.integration.workloads import deployment, http_server_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster


def _pods(core: client.CoreV1Api, app: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod("default", label_selector=f"app={app}").items


def test_deployment_runs_ready_pod_reachable_at_pod_ip(cluster):
    core = client.CoreV1Api(cluster.api_client())
    cluster.kubectl("apply", "-f", "-", input=json.dumps(deployment("web", http_server_container(gpus=2))))

    replica_sets = wait_for(
        lambda: (
            client.AppsV1Api(cluster.api_client())
            .list_namespaced_replica_set("default", label_selector="app=web")
            .items
        ),
        60,
        "the controller-manager to create a ReplicaSet",
    )
    assert replica_sets[0].metadata.owner_references[0].kind == "Deployment"

    def ready_pod() -> client.V1Pod | None:
        pods = [p for p in _pods(core, "web") if p.status.conditions]
        ready = [
            p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions)
        ]
        return ready[0] if ready else None

    pod = wait_for(ready_pod, 90, "the web pod to turn Ready through its readiness probe")
    assert pod.spec.node_name.startswith("kvant-gpu-")
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(cluster.addresses.pod_cidr)
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:8080/", timeout=5) as response:
        assert response.status == 200
    cluster.kubectl("delete", "deployment", "web", "--wait=false")


def test_pod_asking_more_gpus_than_any_node_stays_unschedulable(cluster):
    core = client.CoreV1Api(cluster.api_client())
    cluster.kubectl("apply", "-f", "-", input=json.dumps(deployment("greedy", http_server_container(gpus=9))))

    def unschedulable() -> client.V1PodCondition | None:
        for pod in _pods(core, "greedy"):
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                    return condition
        return None

    condition = wait_for(unschedulable, 60, "the scheduler to mark the 9-GPU pod Unschedulable")
    assert "nvidia.com/gpu" in condition.message
    assert all(p.spec.node_name is None for p in _pods(core, "greedy"))
    assert all(p.status.phase == "Pending" for p in _pods(core, "greedy"))
    cluster.kubectl("delete", "deployment", "greedy", "--wait=false")
