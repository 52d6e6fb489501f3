"""Pod specs for the local cluster's own tests, run by the node agent's `kvant-testbox` image."""

from __future__ import annotations

from typing import Any

from kvant_contracts.kube_object import Obj

TESTBOX = "ghcr.io/kvant-dev/kvant-testbox:test"
POD_IP_ENV = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def http_server_container(port: int = 8080, gpus: int = 0) -> Obj:
    container: Obj = {
        "name": "web",
        "image": TESTBOX,
        "args": ["-m", "http.server", str(port), "--bind", "$(POD_IP)"],
        "env": [POD_IP_ENV],
        "ports": [{"name": "http", "containerPort": port}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return container


def python_container(name: str, code: str, **extra: Any) -> Obj:
    return {"name": name, "image": TESTBOX, "args": ["-c", code], "env": [POD_IP_ENV], **extra}


def deployment(name: str, container: Obj, replicas: int = 1) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def job(name: str, code: str, backoff_limit: int = 0) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {"spec": {"restartPolicy": "Never", "containers": [python_container("main", code)]}},
        },
    }


def pod(name: str, *containers: Obj, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": list(containers), **spec},
    }
