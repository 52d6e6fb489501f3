"""What a pod sees: downward-API env, ConfigMap/Secret env and files, PVC folders; a ConfigMap edit
reaches the files as late as on a kubelet (after the node's sync delay), never at once."""

from __future__ import annotations

import json
import shutil
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from tests.integration.workloads import pod, python_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

# Serves its env and the mounted files over HTTP so the test can read what the process sees.
REPORTER = """
import http.server, json, os, pathlib
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        files = {p.name: p.read_text() for p in pathlib.Path('/etc/limits').iterdir() if p.is_file()}
        claim = sorted(p.name for p in pathlib.Path('/artifacts').iterdir())
        body = json.dumps({'env': dict(os.environ), 'files': files, 'claim': claim}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
http.server.HTTPServer((os.environ['POD_IP'], 8080), H).serve_forever()
"""


def _report(pod_ip: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{pod_ip}:8080/", timeout=5) as response:
        report: dict[str, Any] = json.load(response)
        return report


def _objects(claim_dir: str) -> list[dict[str, object]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "limits"},
            "data": {"maxConcurrency": "64"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "stringData": {"token": "s3cret"},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "artifacts-pv"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "local",
                "hostPath": {"path": claim_dir},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "artifacts"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "local",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def test_pod_sees_env_files_and_claim_and_configmap_edits_arrive_after_the_sync_delay(cluster):
    claim_dir = "/srv/integration/artifacts"  # a path on the node, which lives in the cluster's folder
    shutil.rmtree(cluster.node_path(claim_dir), ignore_errors=True)
    cluster.node_path(claim_dir).mkdir(parents=True)
    (cluster.node_path(claim_dir) / "model.safetensors").write_text("weights")
    core = client.CoreV1Api(cluster.api_client())
    for obj in _objects(claim_dir):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
    container = python_container(
        "reporter",
        REPORTER,
        volumeMounts=[
            {"name": "limits", "mountPath": "/etc/limits"},
            {"name": "artifacts", "mountPath": "/artifacts", "readOnly": True},
        ],
    )
    container["env"] += [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "LIMIT", "valueFrom": {"configMapKeyRef": {"name": "limits", "key": "maxConcurrency"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "GREETING", "value": "hello $(POD_NAME)"},
    ]
    volumes = [
        {"name": "limits", "configMap": {"name": "limits"}},
        {"name": "artifacts", "persistentVolumeClaim": {"claimName": "artifacts"}},
    ]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod("reporter", container, volumes=volumes)))

    def pod_ip() -> str | None:
        status = core.read_namespaced_pod("reporter", "default").status
        running = status.container_statuses and status.container_statuses[0].state.running
        return status.pod_ip if running else None

    ip = wait_for(pod_ip, 90, "the reporter pod to run (needs the PVC bound by the controller-manager)")
    report = wait_for(lambda: _try_report(ip), 30, "the reporter to answer")
    env = report["env"]
    assert env["POD_NAME"] == "reporter" and env["POD_IP"] == ip
    assert env["LIMIT"] == "64" and env["TOKEN"] == "s3cret" and env["GREETING"] == "hello reporter"
    assert report["files"] == {"maxConcurrency": "64"}
    assert report["claim"] == ["model.safetensors"]

    cluster.kubectl(
        "patch", "configmap", "limits", "--type=merge", "-p", '{"data": {"maxConcurrency": "48"}}'
    )
    assert _report(ip)["files"] == {"maxConcurrency": "64"}  # not yet: the next sync after the delay
    wait_for(
        lambda: _report(ip)["files"] == {"maxConcurrency": "48"},
        cluster.projection_delay + 30,
        "the ConfigMap edit to reach the file",
    )
    cluster.kubectl("delete", "pod", "reporter", "--wait=false")


def _try_report(ip: str) -> dict[str, Any] | None:
    try:
        return _report(ip)
    except OSError:
        return None
