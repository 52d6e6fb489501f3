"""A Node object with GPU capacity, kept Ready through its Lease and status heartbeats."""

from __future__ import annotations

import platform
import uuid
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvant_contracts.kube_object import Obj
from kvant_dev.nodeagent.container import rfc3339

LOCAL_NODE_LABEL = "kvant.dev/local-node"
LEASE_SECONDS = 40


@dataclass(frozen=True)
class NodeSpec:
    name: str
    host_ip: str
    log_port: int
    gpus: int
    gpu_resource: str = "nvidia.com/gpu"
    gpu_product: str = "NVIDIA-H200"
    kubelet_version: str = "v0.0.0"
    cordoned: bool = False  # registered unschedulable (a spare node)


def node_name(index: int) -> str:
    """The local cluster's nodes are named by their place in the agent's list."""
    return f"kvant-gpu-{index}"


def _now_micro() -> str:
    return rfc3339().replace("Z", ".000000Z")


class NodeHeartbeat:
    def __init__(self, api: client.ApiClient, spec: NodeSpec) -> None:
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.spec = spec
        self._boot_id = str(uuid.uuid4())

    def register(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.spec.name,
                "labels": {
                    "kubernetes.io/hostname": self.spec.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    LOCAL_NODE_LABEL: "true",
                    "nvidia.com/gpu.product": self.spec.gpu_product,
                    "nvidia.com/gpu.count": str(self.spec.gpus),
                },
            },
            "spec": {"unschedulable": self.spec.cordoned},
        }
        try:
            self.core.create_node(body)
        except ApiException as err:
            if err.status != 409:
                raise
        self.report_status()
        self.renew_lease()

    def report_status(self) -> None:
        capacity = {
            "cpu": "32",
            "memory": "256Gi",
            "pods": "110",
            "ephemeral-storage": "500Gi",
            self.spec.gpu_resource: str(self.spec.gpus),
        }
        now = rfc3339()

        def condition(kind: str, status: str, reason: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
                "message": "kvant local node agent",
            }

        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                condition("Ready", "True", "KubeletReady"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": self.spec.host_ip},
                {"type": "Hostname", "address": self.spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.spec.log_port}},
            "nodeInfo": {
                "machineID": self.spec.name,
                "systemUUID": self.spec.name,
                "bootID": self._boot_id,
                "kernelVersion": platform.release(),
                "osImage": "kvant local node agent",
                "containerRuntimeVersion": "kvant-local://processes",
                "kubeletVersion": self.spec.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        self.core.patch_node_status(self.spec.name, {"status": status})

    def renew_lease(self) -> None:
        body = {
            "metadata": {"name": self.spec.name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.spec.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _now_micro(),
            },
        }
        try:
            self.coordination.patch_namespaced_lease(
                self.spec.name, "kube-node-lease", {"spec": body["spec"]}
            )
        except ApiException as err:
            if err.status != 404:
                raise
            self.coordination.create_namespaced_lease("kube-node-lease", body)
