"""A Service's ClusterIP works as in any cluster: kube-proxy (nftables) spreads clients on the host
and in pods over the ready endpoints, and pods find it through the kubelet's Service variables."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter

import pytest
from kubernetes import client

from tests.integration.workloads import deployment, pod, python_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

# Answers every GET with the pod's hostname, which the node agent sets to the pod's name.
HOSTNAME_SERVER = """
import http.server, socket
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(socket.gethostname().encode())
http.server.HTTPServer(('0.0.0.0', 8080), Handler).serve_forever()
"""
# A client pod: asks the Service, found through its environment variables, and prints who answered.
SERVICE_CLIENT = """
import os, urllib.request
url = f"http://{os.environ['WHOAMI_SERVICE_HOST']}:{os.environ['WHOAMI_SERVICE_PORT_HTTP']}/"
seen = sorted({urllib.request.urlopen(url, timeout=5).read().decode() for _ in range(40)})
print(','.join(seen))
"""
REQUESTS = 40  # enough that both of two equally weighted replicas answer (miss odds: 2 x 2^-40)


def test_cluster_ip_spreads_host_and_pod_clients_over_both_replicas(cluster):
    core = client.CoreV1Api(cluster.api_client())
    server = python_container(
        "web",
        HOSTNAME_SERVER,
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "whoami"},
        "spec": {
            "selector": {"app": "whoami"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }
    for obj in (service, deployment("whoami", server, replicas=2)):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
    cluster.kubectl("wait", "--for=condition=Available", "deployment/whoami", "--timeout=90s")
    replicas = {
        p.metadata.name for p in core.list_namespaced_pod("default", label_selector="app=whoami").items
    }
    cluster_ip = core.read_namespaced_service("whoami", "default").spec.cluster_ip

    def answered_by_both() -> Counter[str] | None:
        seen = Counter(_get(f"http://{cluster_ip}/") for _ in range(REQUESTS))
        return seen if set(seen) == replicas else None

    # Retried while kube-proxy programs the endpoints: a round passes only when every request of it was
    # answered (an error would be a key of its own) and both replicas answered.
    wait_for(answered_by_both, 30, "requests to the ClusterIP from the host to reach both replicas")

    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            pod("whoami-client", python_container("ask", SERVICE_CLIENT), restartPolicy="Never")
        ),
    )

    def client_said() -> str | None:
        phase = core.read_namespaced_pod("whoami-client", "default").status.phase
        return cluster.kubectl("logs", "whoami-client").stdout.strip() if phase == "Succeeded" else None

    assert set(wait_for(client_said, 60, "the client pod to finish").split(",")) == replicas
    cluster.kubectl("delete", "pod", "whoami-client", "--wait=false")
    cluster.kubectl("delete", "deployment", "whoami", "--wait=false")
    cluster.kubectl("delete", "service", "whoami", "--wait=false")


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError as err:
        return f"error: {err}"
