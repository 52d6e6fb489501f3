"""Pods resolve Service names through the cluster DNS (CoreDNS, node-local), and nothing else: a
name outside `cluster.local` is NXDOMAIN, so no DNS query leaves this machine."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.integration.workloads import pod, python_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

RESOLVER = """
import json, socket
def lookup(name):
    try:
        return socket.gethostbyname(name)
    except socket.gaierror as err:
        return f"error {err.errno}"
names = ["named", "named.default", "named.default.svc.cluster.local", "example.com"]
print(json.dumps({name: lookup(name) for name in names}))
"""


def test_pod_resolves_a_service_by_name_and_nothing_outside_the_cluster(cluster):
    core = client.CoreV1Api(cluster.api_client())
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "named"},
        "spec": {"selector": {"app": "nobody"}, "ports": [{"port": 80}]},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(service))
    cluster_ip = core.read_namespaced_service("named", "default").spec.cluster_ip
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(pod("resolver", python_container("resolve", RESOLVER), restartPolicy="Never")),
    )

    def answers() -> dict[str, str] | None:
        if core.read_namespaced_pod("resolver", "default").status.phase != "Succeeded":
            return None
        return dict(json.loads(cluster.kubectl("logs", "resolver").stdout.strip().splitlines()[-1]))

    seen = wait_for(answers, 60, "the resolver pod's answers")
    assert seen["named"] == seen["named.default"] == seen["named.default.svc.cluster.local"] == cluster_ip
    assert seen["example.com"].startswith("error"), "no name outside the cluster resolves"
    cluster.kubectl("delete", "pod", "resolver", "--wait=false")
    cluster.kubectl("delete", "service", "named", "--wait=false")
